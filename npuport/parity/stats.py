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
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

SAMPLE = 64
CHECKSUM = "npuport.wordsum64/1"
_WORD = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_FIELDS = 4  # min, max, sum, norm


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
            from npuport.parity import stats_triton
            _FUSED = stats_triton.triton is not None and torch.cuda.is_available()
        except Exception:
            _FUSED = False
    return _FUSED


_FUSED: bool | None = None


_FUSED_DTYPES = frozenset((torch.bfloat16, torch.float16, torch.float32))


class StatsBatcher:
    """Queue tensors under integer ids; reduce them in batches; `finish()` returns {id: Stats} after one copy."""

    def __init__(self, budget_bytes: int = 1 << 30, fused: bool | None = None) -> None:
        self.budget = budget_bytes
        # fused=None: the Triton path wherever it can run (CUDA tensors with Triton importable); False: torch only.
        self.fused = fused_available() if fused is None else fused
        self._pending: list[tuple[int, torch.Tensor, int]] = []
        self._pending_bytes = 0
        self._parts: list[tuple[list[int], torch.Tensor]] = []
        self._numel: dict[int, int] = {}
        self._mutated: set[int] = set()
        self.kernels: set[str] = set()  # which reducers ran: "triton", "torch" (written to the manifest)

    def add(self, blob: int, t: torch.Tensor, version: int | None = None) -> bool:
        """Queue `t` (its `_version` now, if the caller read it already); True when this call flushed the queue.
        No detach here (a new tensor object per call): flush runs under no_grad. Runs in every module hook, so it
        does the least: sizes are read at flush."""
        self._pending.append((blob, t, t._version if version is None else version))
        self._pending_bytes += t.nbytes
        if self._pending_bytes >= self.budget:
            self.flush()
            return True
        return False

    @torch.no_grad()
    def flush(self) -> None:
        groups: dict[tuple[Any, ...], list[tuple[int, torch.Tensor]]] = {}
        fused: dict[tuple[Any, ...], list[tuple[int, torch.Tensor, int]]] = {}
        numel_of, mutated, use_fused = self._numel, self._mutated, self.fused
        for blob, t, version in self._pending:  # a few hundred tensors a step: each attribute read counts
            if t._version != version:
                mutated.add(blob)
            n = numel_of[blob] = t.numel()
            dtype = t.dtype
            # Triton path: contiguous, non-empty, 16-byte aligned (vector loads) bf16/fp16/fp32 on CUDA
            if use_fused and n and dtype in _FUSED_DTYPES and t.is_cuda and t.is_contiguous() and not t.data_ptr() & 15:
                fused.setdefault((dtype, t.device), []).append((blob, t, n))
            else:
                groups.setdefault((dtype, n, t.device), []).append((blob, t))
        self._pending, self._pending_bytes = [], 0
        if fused:
            from npuport.parity.stats_triton import packed_rows
        for members in fused.values():
            self._parts.append(([m[0] for m in members], packed_rows([m[1] for m in members], [m[2] for m in members])))
            self.kernels.add("triton")
        for members in groups.values():
            self.kernels.add("torch")
            flat = [t.reshape(-1) for _, t in members]
            stack = flat[0][None] if len(flat) == 1 else torch.stack(flat)
            self._parts.append(([b for b, _ in members], _packed_group(stack)))

    def finish(self) -> "StatsTable":
        self.flush()
        if not self._parts:
            return StatsTable.empty()
        ids = [b for blobs, _ in self._parts for b in blobs]
        devices = {p.device for _, p in self._parts}
        if len(devices) == 1:
            host = torch.cat([p for _, p in self._parts]).cpu()  # the one device -> host copy
        else:  # a model spread over devices: one copy per device
            host = torch.cat([p.cpu() for _, p in self._parts])
        self._parts = []
        floats = host[:, : _FIELDS + SAMPLE].contiguous().view(torch.float64)
        counts = torch.tensor([self._numel[b] for b in ids], dtype=torch.float64)
        mutated = torch.tensor([b in self._mutated for b in ids], dtype=torch.uint8) if self._mutated else torch.zeros(len(ids), dtype=torch.uint8)
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
