"""What a user says about the job, checked before anything loads: the standard layout of --parallel, the world size
and rank of --world-size / --rank, the dtype of --dtype and the training step's --optimizer / --master-weights.

This module is light (no torch): the CLI calls it before its first progress line, so a bad option is one line and
exit 2 before a model is built (npuport.model.distributed applies the layout once the model is there).
"""

from __future__ import annotations

from dataclasses import dataclass

from npuport.errors import NpuportError
from npuport.model.scenarios import Scenario

# the names --dtype takes (npuport.model.hf.build.parse_dtype maps them to torch dtypes)
DTYPE_NAMES = ("float32", "float16", "bfloat16", "fp32", "fp16", "bf16")
FLOAT32_NAMES = ("float32", "fp32")


@dataclass(frozen=True)
class Layout:
    """A standard parallel layout: tensor, data (with its ZeRO stage), expert and pipeline parallel degrees."""

    tp: int = 1
    dp: int = 1
    zero: int = 0  # 0: replicated data parallel (DDP), 1 / 2: gradients and optimizer sharded, 3: parameters too
    ep: int = 1
    pp: int = 1

    @property
    def world_size(self) -> int:
        return self.tp * self.dp * self.pp  # expert parallel reuses the data-parallel ranks

    @property
    def expert_dp(self) -> int:
        """The ranks that hold the same experts: their gradients are reduced over this group, not over dp
        (Megatron-LM's expert data parallel: dp x tp / ep ranks of a stage when experts are not tensor-split)."""
        return max(1, self.dp * self.tp // self.ep)

    def describe(self) -> str:
        parts = [f"{k}={getattr(self, k)}" for k in _KEYS if getattr(self, k) != (0 if k == "zero" else 1)]
        return ",".join(parts) or "tp=1"


_KEYS = ("tp", "dp", "zero", "ep", "pp")
_USAGE = "comma-separated KEY=N with KEY one of tp, dp, zero, ep, pp, each once (e.g. tp=8,dp=4,zero=3)"


def parse_layout(text: str) -> Layout:
    """'tp=8,dp=4,zero=3' -> Layout; a bad, repeated or empty key or value is a usage error (one line, exit 2)."""
    values: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in _KEYS or not value.isdigit():
            raise NpuportError(f"cannot read --parallel {text!r}", _USAGE, part or "an empty entry")
        if key in values:
            raise NpuportError(f"cannot read --parallel {text!r}: {key} given twice", _USAGE,
                               f"{key}={values[key]} and {key}={value}")
        values[key] = int(value)
    lay = Layout(**values)
    if min(lay.tp, lay.dp, lay.ep, lay.pp) < 1 or lay.zero not in (0, 1, 2, 3):
        raise NpuportError(f"cannot use --parallel {text!r}", "tp, dp, ep, pp of at least 1 and zero 0-3", lay.describe())
    if lay.zero and lay.dp == 1:  # ZeRO shards over the data-parallel ranks: with one there is nothing to shard
        raise NpuportError(f"cannot use --parallel {text!r}: zero={lay.zero} shards over data-parallel ranks",
                           f"dp=N of 2 or more with zero={lay.zero}", f"dp=1, zero={lay.zero}")
    if lay.ep > 1 and (lay.dp * lay.tp) % lay.ep:
        raise NpuportError(f"cannot use --parallel {text!r}", "ep dividing dp x tp (experts spread over the data- and "
                           "tensor-parallel ranks)", f"ep={lay.ep}, dp x tp = {lay.dp * lay.tp}")
    return lay


def stage_ranks(layout: Layout) -> int:
    """The ranks of one pipeline stage: the fake process group the traced rank belongs to."""
    return layout.dp * layout.tp


def job(parallel: str | None, world_size: int | None, rank: int) -> tuple[Layout | None, int | None]:
    """--parallel, --world-size and --rank together -> (the layout or None, the ranks of the traced process group
    or None for a single process). Every check that needs no model; each failure one line, exit 2."""
    layout = parse_layout(parallel) if parallel is not None else None
    if world_size is not None and world_size < 1:  # 0 would read as "no job" and trace a single process
        raise NpuportError("bad --world-size", "a number of ranks, at least 1", str(world_size))
    if layout is not None and world_size is not None and world_size != layout.world_size:
        raise NpuportError("--world-size does not match --parallel", f"{layout.world_size} ranks for {layout.describe()}",
                           str(world_size))
    ranks = stage_ranks(layout) if layout is not None else world_size
    if rank < 0:
        raise NpuportError("bad --rank", "a rank of the job, 0 or more", str(rank))
    if rank and not ranks:
        raise NpuportError("--rank names a rank of a job", "--world-size N or --parallel with it", f"--rank {rank} alone")
    if ranks and rank >= ranks:
        raise NpuportError("--rank is outside the job", f"0 <= --rank < {ranks}"
                           + (f" (the ranks of one pipeline stage of {layout.describe()})" if layout is not None and layout.pp > 1
                              else ""),
                           f"--rank {rank}")
    return layout, ranks


def check_dtype_name(name: str | None) -> None:
    """--dtype is one of DTYPE_NAMES (the model is built in it)."""
    if name is not None and name not in DTYPE_NAMES:
        raise NpuportError(f"unknown dtype {name!r}", "float32, float16 or bfloat16", name)


def check_training(scenarios: list[Scenario], optimizer: str | None, master_weights: bool, dtype: str | None) -> None:
    """--optimizer (given, not defaulted) and --master-weights size the training step's memory: without a train
    scenario they would change nothing, and master weights of float32 weights would be a second float32 copy."""
    if all(sc.kind != "train" for sc in scenarios):
        given = [f for f, on in ((f"--optimizer {optimizer}", optimizer is not None), ("--master-weights", master_weights))
                 if on]
        if given:
            verb = "size" if len(given) > 1 else "sizes"
            raise NpuportError(f"{' and '.join(given)} {verb} the training step's memory, and no train scenario is audited",
                               "a train scenario with them (--scenario train...), or neither",
                               "--scenario " + "+".join(sc.name for sc in scenarios))
    if master_weights and dtype in FLOAT32_NAMES:
        raise NpuportError("--master-weights keeps a float32 copy of float16 / bfloat16 weights: float32 weights have "
                           "nothing to copy", "--dtype float16 or bfloat16 with --master-weights, or no --master-weights",
                           f"--dtype {dtype}")
