"""What a parity capture holds: one Entry per captured tensor (module input / output, op output, gradient), keyed
by module path and call index, pointing at a blob (a host copy or its statistics); the options a capture ran with."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from npuport.parity.stats import Stats, StatsTable, tensor_stats

ROOT = "<model>"

def call_key(path: str, call: int) -> str:
    return f"{path or ROOT}#{call}"

class Entry(NamedTuple):
    """One captured tensor. io: in / out (module), op (an aten op's output), grad_out (gradient of a module
    output), grad (a parameter's gradient). `order` is the execution order of the event that completed it.
    A NamedTuple because thousands are made inside a forward pass."""

    key: str
    module: str
    call: int
    io: str
    leaf: str
    shape: tuple[int, ...]
    dtype: str
    blob: int
    order: int
    op: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"key": self.key, "module": self.module, "call": self.call, "io": self.io, "leaf": self.leaf,
               "shape": list(self.shape), "dtype": self.dtype, "blob": self.blob, "order": self.order}
        if self.op:
            out["op"] = self.op
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Entry":
        return Entry(d["key"], d["module"], int(d["call"]), d["io"], d["leaf"], tuple(map(int, d["shape"])),
                     d["dtype"], int(d["blob"]), int(d["order"]), d.get("op"))

@dataclass(frozen=True)
class CaptureOptions:
    mode: str = "full"  # full | stats
    ops: bool = False
    op_sequence: bool = True
    backward: bool = False
    keep: tuple[str, ...] = ()  # fnmatch patterns of module paths kept in full in stats mode
    budget_bytes: int | None = None  # stats mode: bytes queued between statistics flushes; None: from free memory
    stats_kernel: str = "auto"  # auto | triton | torch: which reducer computes stats-mode statistics (stats.py)
    # the step runs under torch.compile with this backend (the scenario's mode=compile): only the model's inputs,
    # outputs and gradients are captured (capture.py says why); None: eager, every module boundary captured
    compiled: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "ops": self.ops, "op_sequence": self.op_sequence, "backward": self.backward,
                "keep": list(self.keep), "stats_kernel": self.stats_kernel,
                "stats_budget_bytes": self.budget_bytes}

@dataclass
class Capture:
    mode: str
    entries: list[Entry]
    full: Mapping[int, torch.Tensor]  # a dict from a live capture, LazyTensors from an artifact (artifact.py)
    stats: MutableMapping[int, Stats]  # a StatsTable from a stats capture or an artifact
    calls: dict[str, dict[str, Any]]  # call key -> {"spec": tree spec of {args, kwargs}, "blobs": [blob per tensor]}
    module_sequence: list[str]
    op_sequence: list[str] | None
    warnings: list[str] = field(default_factory=list)
    fault_hits: int | None = None
    fault_seen: list[str] = field(default_factory=list)  # the ops that ran inside the fault's module
    stats_kernels: set[str] = field(default_factory=set)  # the reducers that computed `stats` (stats.py)
    dist: dict[int, dict[str, Any]] = field(default_factory=dict)  # blob -> placement of a sharded tensor (shards.py)
    compiled: str | None = None  # the torch.compile backend the step ran under (None: eager)

    def stats_of(self, blob: int) -> Stats:
        if blob not in self.stats:
            self.stats[blob] = tensor_stats(self.full[blob])
        return self.stats[blob]

    def prefetch_stats(self, blobs: Iterable[int]) -> None:
        """Make the `Stats` of many blobs at once before stats_of reads them one by one (StatsTable.prefetch)."""
        if isinstance(self.stats, StatsTable):
            self.stats.prefetch(blobs)

    def by_key(self) -> dict[str, Entry]:
        return {e.key: e for e in self.entries}
