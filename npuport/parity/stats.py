"""Per-tensor summary statistics computed on the device in a few batched kernels, copied to the host once.

Why batched: a forward hook that reduces each output separately launches several kernels per tensor and is
launch-bound (2.6x a plain forward on an H200 for TinyLlama, see docs/parity.md). Here captured tensors are queued,
grouped by (dtype, numel), stacked, and reduced along one axis: a handful of kernels per group and one
device->host copy at `finish()`. The queue is flushed when it holds `budget_bytes`, bounding extra memory.

Per tensor: count, min, max, sum and L2 norm (accumulated in float32, float64 for float64 tensors), a checksum of
the raw bytes (sum of the tensor's machine words as int64: equal bytes give equal checksums, computed on device),
and `SAMPLE` elements at positions 0, step, 2*step, ... with step = max(1, numel // SAMPLE), identical on every
device so samples compare element by element.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass

import torch

from npuport.devices.memory import device_free_bytes
from npuport.parity import stats_triton
from npuport.parity.stats_layout import FIELDS as _FIELDS
from npuport.parity.stats_layout import SAMPLE
from npuport.parity.stats_triton import packed_rows

CHECKSUM = "npuport.wordsum64/1"
_WORD = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class Stats:
    count: int
    min: float
    max: float
    sum: float
    norm: float
    checksum: int
    sample: tuple[float, ...]  # len <= SAMPLE
    mutated: bool = False  # the tensor changed in place between capture and reduction

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    @property
    def nonfinite(self) -> bool:
        return not (math.isfinite(self.sum) and math.isfinite(self.norm))

    def row(self) -> list[float]:
        return [float(self.count), self.min, self.max, self.sum, self.norm]


def sample_step(numel: int) -> int:
    return max(1, numel // SAMPLE)


def _packed_group(stack: torch.Tensor) -> torch.Tensor:
    """(G, n) tensors of one dtype -> (G, 4 + SAMPLE + 1) int64: float64 stats and samples bit-cast, then checksum."""
    g, n = stack.shape
    acc = torch.float64 if stack.dtype == torch.float64 else torch.float32
    if stack.dtype == torch.bool:
        stack = stack.to(torch.uint8)
    words = stack.view(_WORD[stack.element_size()]) if stack.is_floating_point() else stack
    checksum = words.sum(dim=1, dtype=torch.int64)
    if not stack.is_floating_point():
        stack = stack.to(torch.float64)
        acc = torch.float64
    if n == 0:
        vals = torch.zeros(g, _FIELDS, dtype=torch.float64, device=stack.device)
    else:
        lo, hi = torch.aminmax(stack, dim=1)
        total = stack.sum(dim=1, dtype=acc)
        norm = torch.linalg.vector_norm(stack, dim=1, dtype=acc)
        vals = torch.stack([lo.to(torch.float64), hi.to(torch.float64), total.to(torch.float64), norm.to(torch.float64)], dim=1)
    samples = stack[:, :: sample_step(n)][:, :SAMPLE].to(torch.float64)
    if samples.shape[1] < SAMPLE:
        samples = torch.nn.functional.pad(samples, (0, SAMPLE - samples.shape[1]), value=float("nan"))
    return torch.cat([torch.cat([vals, samples], dim=1).view(torch.int64), checksum[:, None]], dim=1)


def _unpack(row: torch.Tensor, numel: int, mutated: bool = False) -> Stats:
    floats = row[: _FIELDS + SAMPLE].view(torch.float64).tolist()
    k = min(numel, SAMPLE)
    return Stats(count=numel, min=floats[0], max=floats[1], sum=floats[2], norm=floats[3], checksum=int(row[-1]),
                 sample=tuple(floats[_FIELDS: _FIELDS + k]), mutated=mutated)


def tensor_stats(t: torch.Tensor) -> Stats:
    """The same statistics for one tensor (host side: a full capture compared with a stats-only one)."""
    flat = t.detach().reshape(1, -1)
    return _unpack(_packed_group(flat).cpu()[0], t.numel())


def fused_available() -> bool:
    """Triton importable and CUDA usable: the two-launch statistics path (stats_triton.py) can run."""
    global _FUSED
    if _FUSED is None:
        try:
            _FUSED = stats_triton.triton is not None and torch.cuda.is_available()
        except Exception:
            _FUSED = False
    return _FUSED


_FUSED: bool | None = None


_FUSED_DTYPES = stats_triton.DTYPES  # floats and integers; float64 stays on torch (stats_triton.py)


def _fused_device(device: torch.device) -> bool:
    """The Triton path runs on CUDA devices only (a patch point for host-cost measurements on CPU)."""
    return device.type == "cuda"


# The automatic queue budget: a share of the memory the device has free when a step starts, within bounds. Why
# a share of free memory: each flush costs fixed host time (a table, two launches: about 0.3 ms on an H200 host,
# docs/parity.md) and a host-bound forward pays it in full, so fewer flushes are faster; but the queue keeps
# activations alive that the forward would have freed, so it must stay small next to what the model itself needs.
AUTO_SHARE = 8  # budget = free device memory / AUTO_SHARE ...
AUTO_MIN = 256 << 20  # ... at least this (a device nearly full: flush often rather than fail) ...
AUTO_MAX = 8 << 30  # ... at most this
HOST_BUDGET = 1 << 30  # CPU tensors, or a device whose free memory cannot be read


def auto_budget(device: torch.device) -> int:
    """The queue budget for tensors on `device` when none was given (see AUTO_SHARE)."""
    free = device_free_bytes(device, include_cached=True)
    if free is None:
        return HOST_BUDGET
    return max(AUTO_MIN, min(AUTO_MAX, free // AUTO_SHARE))


class StatsBatcher:
    """Queue tensors under integer ids; reduce them in batches; `finish()` returns their statistics after one copy.
    `budget_bytes` bounds the bytes queued between flushes; None sizes it from the first tensor's device
    (`auto_budget`)."""

    def __init__(self, budget_bytes: int | None = None, fused: bool | None = None) -> None:
        # -1 until resolved: the first add() then takes the slow branch, so the hot path tests one comparison.
        self.budget = -1 if budget_bytes is None else budget_bytes
        # fused=None: the Triton path wherever it can run (CUDA tensors with Triton importable); False: torch only.
        self.fused = fused_available() if fused is None else fused
        self._pending: list[tuple[int, torch.Tensor, int]] = []
        self._pending_bytes = 0
        self._parts: list[tuple[list[int], list[int], torch.Tensor]] = []  # (blobs, numels, packed rows) per launch group
        self._mutated: set[int] = set()
        self.kernels: set[str] = set()  # which reducers ran: "triton", "torch" (written to the manifest)

    def add(self, blob: int, t: torch.Tensor, version: int | None = None) -> bool:
        """Queue `t` (its `_version` now, if the caller read it already); True when this call flushed the queue.
        No detach here (a new tensor object per call): flush runs under no_grad. Runs once per captured tensor, so it
        does the least: sizes are read at flush."""
        self._pending.append((blob, t, t._version if version is None else version))
        self._pending_bytes += t.nbytes
        if self._pending_bytes >= self.budget:
            if self.budget < 0:
                self.budget = auto_budget(t.device)
                if self._pending_bytes < self.budget:
                    return False
            self.flush()
            return True
        return False

    @torch.no_grad()
    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending, self._pending_bytes = [], 0
        mutated = self._mutated
        # One pass, grouped by (dtype, device index): a few hundred tensors a step, so each attribute read counts.
        kinds: dict[tuple[torch.dtype, int], list[tuple[int, torch.Tensor, int]]] = {}
        for item in pending:
            t = item[1]
            if t._version != item[2]:
                mutated.add(item[0])
            key = (t.dtype, t.get_device())
            group = kinds.get(key)
            if group is None:
                kinds[key] = [item]
            else:
                group.append(item)
        for (dtype, _), members in kinds.items():
            device = members[0][1].device
            if self.fused and dtype in _FUSED_DTYPES and _fused_device(device):
                self._flush_fused(members, device)
            else:
                self._flush_torch(members)

    def _flush_fused(self, members: list[tuple[int, torch.Tensor, int]], device: torch.device) -> None:
        """Triton path: contiguous, non-empty, 16-byte aligned (vector loads) tensors; the rest go to torch."""
        blobs: list[int] = []
        numels: list[int] = []
        ptrs: list[int] = []
        rest = []
        for item in members:
            t = item[1]
            n = t.numel()
            ptr = t.data_ptr()
            if n and not ptr & 15 and t.is_contiguous():
                blobs.append(item[0])
                numels.append(n)
                ptrs.append(ptr)
            else:
                rest.append(item)
        if blobs:
            self._parts.append((blobs, numels, packed_rows(ptrs, numels, members[0][1].dtype, device)))
            self.kernels.add("triton")
        if rest:
            self._flush_torch(rest)

    def _flush_torch(self, members: list[tuple[int, torch.Tensor, int]]) -> None:
        """Stack each (numel, device) group of one dtype and reduce it with torch ops."""
        self.kernels.add("torch")
        groups: dict[tuple[int, int], list[torch.Tensor]] = {}
        blobs: dict[tuple[int, int], list[int]] = {}
        for blob, t, _ in members:
            key = (t.numel(), t.get_device())
            groups.setdefault(key, []).append(t.reshape(-1))
            blobs.setdefault(key, []).append(blob)
        for key, flat in groups.items():
            stack = flat[0][None] if len(flat) == 1 else torch.stack(flat)
            self._parts.append((blobs[key], [key[0]] * len(flat), _packed_group(stack)))

    def finish(self) -> "StatsTable":
        self.flush()
        parts, self._parts = self._parts, []
        if not parts:
            return StatsTable.empty()
        ids = [b for p in parts for b in p[0]]
        numels = [n for p in parts for n in p[1]]
        rows = [p[2] for p in parts]
        devices = {r.device for r in rows}
        if len(devices) == 1:
            host = (rows[0] if len(rows) == 1 else torch.cat(rows)).cpu()  # the one device -> host copy
        else:  # a model spread over devices: one copy per device
            host = torch.cat([r.cpu() for r in rows])
        floats = host[:, : _FIELDS + SAMPLE].view(torch.float64)
        counts = torch.tensor(numels, dtype=torch.float64)
        mutated = (torch.tensor([b in self._mutated for b in ids], dtype=torch.uint8) if self._mutated
                   else torch.zeros(len(ids), dtype=torch.uint8))
        return StatsTable(torch.tensor(ids, dtype=torch.int64), torch.cat([counts[:, None], floats[:, :_FIELDS]], dim=1),
                          host[:, -1].clone(), floats[:, _FIELDS:].clone(), mutated)


class StatsTable(MutableMapping):
    """{blob: Stats} kept as the columns the device produced and the artifact stores (ids, rows = count, min, max, sum,
    norm, checksum, samples, mutated). Why columns: turning a few hundred rows into Python objects at the end of a
    captured step cost about as much host time as the rest of the capture (docs/parity.md); a `Stats` is made only
    when a blob is read (compare reads each once), and saving writes the columns as they are. Blobs assigned later
    (`Capture.stats_of` on a full capture) go to a small overlay."""

    def __init__(self, ids: torch.Tensor, rows: torch.Tensor, checksum: torch.Tensor, samples: torch.Tensor,
                 mutated: torch.Tensor) -> None:
        self.ids, self.rows, self.checksum, self.samples, self.mutated = ids, rows, checksum, samples, mutated
        self._index: dict[int, int] | None = None
        self._made: dict[int, Stats] = {}

    @staticmethod
    def empty() -> "StatsTable":
        return StatsTable(torch.zeros(0, dtype=torch.int64), torch.zeros(0, 5, dtype=torch.float64), torch.zeros(0, dtype=torch.int64),
                          torch.zeros(0, SAMPLE, dtype=torch.float64), torch.zeros(0, dtype=torch.uint8))

    @staticmethod
    def from_tensors(data: dict[str, torch.Tensor]) -> "StatsTable":
        if not data:
            return StatsTable.empty()
        return StatsTable(data["ids"], data["rows"], data["checksum"], data["samples"], data["mutated"])

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """The artifact's columns, sorted by blob id, overlay included."""
        ids, rows, checks, samples, mutated = self.ids, self.rows, self.checksum, self.samples, self.mutated
        extra = [b for b in self._made if b not in self._positions()]
        if extra:
            made = [self._made[b] for b in extra]
            smp = torch.full((len(made), SAMPLE), float("nan"), dtype=torch.float64)
            for i, st in enumerate(made):
                smp[i, : len(st.sample)] = torch.tensor(st.sample, dtype=torch.float64)
            ids = torch.cat([ids, torch.tensor(extra, dtype=torch.int64)])
            rows = torch.cat([rows, torch.tensor([st.row() for st in made], dtype=torch.float64).reshape(-1, 5)])
            checks = torch.cat([checks, torch.tensor([st.checksum for st in made], dtype=torch.int64)])
            samples = torch.cat([samples, smp])
            mutated = torch.cat([mutated, torch.tensor([st.mutated for st in made], dtype=torch.uint8)])
        order = torch.argsort(ids)
        return {"ids": ids[order].contiguous(), "rows": rows[order].contiguous(), "checksum": checks[order].contiguous(),
                "samples": samples[order].contiguous(), "mutated": mutated[order].contiguous()}

    def _positions(self) -> dict[int, int]:
        if self._index is None:
            self._index = {b: i for i, b in enumerate(self.ids.tolist())}
        return self._index

    def __getitem__(self, blob: int) -> Stats:
        st = self._made.get(blob)
        if st is None:
            i = self._positions()[blob]  # KeyError for an unknown blob, as a dict
            count, lo, hi, total, norm = self.rows[i].tolist()
            n = int(count)
            st = Stats(n, lo, hi, total, norm, int(self.checksum[i]), tuple(self.samples[i, : min(n, SAMPLE)].tolist()),
                       bool(self.mutated[i]))
            self._made[blob] = st
        return st

    def prefetch(self, blobs: Iterable[int]) -> None:
        """Make the `Stats` of many blobs from one read of each column: per blob, __getitem__'s four tensor reads
        cost more than everything else a stats-only compare does (docs/performance.md)."""
        pos = self._positions()
        todo = [b for b in dict.fromkeys(blobs) if b not in self._made and b in pos]
        if not todo:
            return
        idx = torch.tensor([pos[b] for b in todo], dtype=torch.int64)
        rows, checks = self.rows[idx].tolist(), self.checksum[idx].tolist()
        samples, mutated = self.samples[idx].tolist(), self.mutated[idx].tolist()
        for b, (count, lo, hi, total, norm), check, smp, mut in zip(todo, rows, checks, samples, mutated):
            n = int(count)
            self._made[b] = Stats(n, lo, hi, total, norm, int(check), tuple(smp[: min(n, SAMPLE)]), bool(mut))

    def __setitem__(self, blob: int, value: Stats) -> None:
        self._made[blob] = value

    def __delitem__(self, blob: int) -> None:
        raise TypeError("StatsTable entries are not deleted")

    def __contains__(self, blob: object) -> bool:
        return blob in self._made or blob in self._positions()

    def __iter__(self) -> Iterator[int]:
        pos = self._positions()
        yield from pos
        yield from (b for b in self._made if b not in pos)

    def __len__(self) -> int:
        pos = self._positions()
        return len(pos) + sum(1 for b in self._made if b not in pos)
