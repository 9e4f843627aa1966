"""One pass over two tensors, chunk by chunk, into the sums every error metric is made of (metrics.py).

Why chunks: converting whole tensors to float64 and computing each metric in its own full-size temporary read every
byte a dozen times from memory (0.02 GB/s per side on the project's 2-core CPU, docs/performance.md). Here a chunk of
CHUNK elements is converted once into float32 buffers that stay in the core's cache, every partial sum of the chunk is
taken there, and only the sums leave it; the next chunk reuses the buffers. A tensor read from an artifact is a
memory map, so a chunk is also the only part of it read at a time.

Exactness. A chunk is summed in float32 (bfloat16, float16 and float32 are exact in it) only when that loses nothing
the metrics need: every value finite, every sum of squares finite and either 0 with all of its values 0 or at least
2^-60 (below it float32 squares lose bits to underflow), and a finite max_rel. Any other chunk, and any tensor of
another dtype (float64, integers), is summed in float64 with NaN / Inf handled position by position (`exact_sums`,
the former whole-tensor code, now per row). Partial sums of chunks are added in float64. Float32 sums carry a relative
error of about 1e-7, so rel_l2 can move by that much; the cosine is made from the sums of squares, where that error
is multiplied by rel_l2 (see `cosine`), so pass / fail decisions move only for values within ~1e-7 relative of a
tolerance. The sums are the same bits whatever the number of threads (_chunk_sums), so a report does not change with
the machine's load (_Pace).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

CHUNK = 1 << 17  # elements: four float32 buffers of 512 KiB, one core's 2 MiB L2 (docs/performance.md)
SMALL = 1 << 12  # a tensor this small is summed exactly in one go: fewer operations than the chunked path
BLOCK = 1 << 15  # elements per row of a chunk's sums: below torch's parallel grain (32768), so one thread sums a row
_FAST = (torch.bfloat16, torch.float16, torch.float32)
_FLOAT32_TINY = torch.finfo(torch.float32).tiny
_MIN_SUM = {torch.float32: 2.0 ** -60, torch.float64: 2.0 ** -900}  # smallest sum of squares without lost bits

# Columns of a row of sums, one row per chunk (or per sampled entry, metrics.py).
N, NAN, INF, OVER, SA, SB, SD, SAB, MAX_ABS, MAX_REL = range(10)
WIDTH = 10


@dataclass(frozen=True)
class Sums:
    """What metrics need from a pair: counts, sums of squares and products (x: device under test, y: reference,
    d = x - y, over finite positions), maxima, over `count` elements."""

    count: int
    finite: int
    nan_mismatch: int
    inf_mismatch: int
    over: int  # |d| > atol + rtol |y|, plus positions non-finite on one side only or with different values
    sa: float
    sb: float
    sd: float
    sab: float
    max_abs: float
    max_rel: float

    @staticmethod
    def of_row(count: int, row: list[float]) -> "Sums":
        return Sums(count, int(row[N]), int(row[NAN]), int(row[INF]), int(row[OVER]), row[SA], row[SB], row[SD],
                    row[SAB], row[MAX_ABS], row[MAX_REL])


def cosine(sa: float, sb: float, sd: float, sab: float) -> float:
    """x.y / (|x| |y|) for non-zero norms. With |d| below both norms, from the sums of squares:
    (|x|^2 + |y|^2 - |d|^2) / (2 |x| |y|), whose error is the sums' relative error times about |d| / |y| (the
    direct quotient's is the sums' error itself, too coarse for float32's 1 - 1e-8 tolerance from float32 sums);
    otherwise the direct quotient, from sums sweep takes in float64 for it (_products)."""
    na, nb = math.sqrt(sa), math.sqrt(sb)
    c = (sa + sb - sd) / (2 * na * nb) if sd < min(sa, sb) else sab / (na * nb)
    return max(-1.0, min(1.0, c))


def sweep(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, tiny: float, chunk: int = CHUNK) -> Sums:
    """The sums of `a` against the reference `b` (same number of elements), one chunk at a time."""
    x, y = a.detach().reshape(-1), b.detach().reshape(-1)
    count = x.numel()
    work = torch.float32 if x.dtype in _FAST and y.dtype in _FAST and tiny >= _FLOAT32_TINY else torch.float64
    with torch.no_grad():
        if count <= min(SMALL, chunk):
            return Sums.of_row(count, exact_sums(x[None], y[None], rtol, atol, tiny)[0].tolist())
        with _PACE.running() as pace:
            rows = _chunk_sums(x, y, rtol, atol, tiny, chunk, work, pace)
            redo = _untrusted(rows, x, y, chunk, work)
            for i in redo:
                pace.chunk_starts()  # on the thread count found faster; not timed: other operations than a chunk's
                s = i * chunk
                rows[i] = exact_sums(x[s: s + chunk][None], y[s: s + chunk][None], rtol, atol, tiny)[0]
            total = rows.sum(0)
            if total[SD] >= min(total[SA], total[SB]) and len(redo) < len(rows):
                # the cosine is then x.y / (|x| |y|) itself (`cosine`): those sums in float64, a second pass
                total[[SA, SB, SAB]] = rows[redo][:, [SA, SB, SAB]].sum(0) + _products(x, y, chunk, set(redo))
        peak = rows[:, MAX_ABS:].amax(0) if len(rows) else torch.zeros(2, dtype=torch.float64)
    row = total.tolist()
    row[MAX_ABS:] = peak.tolist()
    return Sums.of_row(count, row)


def _chunk_sums(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float, tiny: float, chunk: int,
                work: torch.dtype, pace: "_Pace") -> torch.Tensor:
    """(chunks, WIDTH) float64: each chunk's sums in `work` precision, as if every value were finite; x.y left at 0
    (_products, when needed). Sums run over rows of BLOCK elements, each reduced by one thread, so they do not depend
    on the thread count (torch.dot's do: the reported metrics would change with the machine's load, _Pace); the last
    chunk is padded with zeros to whole rows (zeros add nothing to any sum or maximum)."""
    n = x.numel()
    if n == 0:
        return torch.zeros(0, WIDTH, dtype=torch.float64)
    size = min(chunk, n)
    block = min(BLOCK, size)
    rows = -(-size // block)
    full = [torch.zeros(rows * block, dtype=work, device=x.device) for _ in range(4)]
    inplace = x.dtype == work and x.is_contiguous() and size % block == 0
    sums: list[torch.Tensor] = []  # per chunk: row sums of x.x, y.y, d.d (rows each)
    peaks: list[torch.Tensor] = []  # per chunk: max_abs, over, max_rel
    width = rows
    for xc, yc in zip(x.split(size), y.split(size)):
        m = xc.numel()
        xf, yf, d, t = full
        if m != size:  # the last chunk, on whole rows of the buffers
            rows = -(-m // block)
            xf, yf, d, t = (b[: rows * block] for b in full)
        start = pace.chunk_starts()
        if m < rows * block:  # padded: zeros after the values (y's are written over below: pad again)
            xf[m:] = 0
            yf[m:] = 0
            xf[:m].copy_(xc)
            yf[:m].copy_(yc)
        else:
            if inplace:
                xf = xc  # read x where it lies: only y and the temporaries are written
            else:
                xf.copy_(xc)
            yf.copy_(yc)
        torch.sub(xf, yf, out=d)
        for a in (xf, yf, d):
            part = torch.mul(a, a, out=t).view(rows, block).sum(1)
            sums.append(part if rows == width else torch.cat([part, part.new_zeros(width - rows)]))
        peaks.append(d.abs_().amax())
        yf.abs_()
        torch.mul(yf, rtol, out=t).add_(atol)  # the threshold, operation for operation as in exact_sums
        peaks.append(torch.gt(d, t, out=t)[:m].sum())
        peaks.append(torch.div(d, yf.clamp_min_(tiny), out=yf).amax())
        pace.chunk_done(start, m)
    out = torch.zeros(len(peaks) // 3, WIDTH, dtype=torch.float64)
    out[:, N] = float(size)
    out[-1, N] = float(n - (len(out) - 1) * size)
    out[:, [SA, SB, SD]] = torch.stack(sums).sum(1).view(-1, 3).to(torch.float64)  # rows added in a fixed order
    out[:, [MAX_ABS, OVER, MAX_REL]] = torch.stack(peaks).view(-1, 3).to(torch.float64)
    return out


def _products(x: torch.Tensor, y: torch.Tensor, chunk: int, skip: set[int]) -> torch.Tensor:
    """[x.x, y.y, x.y] in float64 over the chunks not in `skip`, rows of BLOCK then chunks added in a fixed order. Only
    a pair whose difference is as large as its values needs them: there the cosine is their quotient, and float32
    sums would move it by 1e-7, more than float32's cosine tolerance leaves (1 - 1e-8)."""
    size = min(chunk, x.numel())
    block = min(BLOCK, size)
    bufs = [torch.zeros(-(-size // block) * block, dtype=torch.float64, device=x.device) for _ in range(3)]
    parts = []
    for i, (xc, yc) in enumerate(zip(x.split(size), y.split(size))):
        if i in skip:
            continue
        m = xc.numel()
        rows = -(-m // block)
        xf, yf, t = (b[: rows * block] for b in bufs)
        xf[m:] = 0
        yf[m:] = 0
        xf[:m].copy_(xc)
        yf[:m].copy_(yc)
        parts += [torch.mul(a, b, out=t).view(rows, block).sum(1).sum() for a, b in ((xf, xf), (yf, yf), (xf, yf))]
    return torch.stack(parts).view(-1, 3).sum(0)


class _Pace:
    """How many threads the chunks run on: torch's setting, or one (torch's OpenMP backend). torch's threads meet at a barrier after every
    operation and a chunk's operations take microseconds, so when another process holds a core every barrier waits
    for a descheduled thread: 20x to 80x slower than one thread (docs/performance.md); on idle cores two threads are
    faster. So both are timed on live chunks and the faster is used; the other is timed again every REPROBE chunks in
    case the load changed. Each is judged by its best of its last WINDOW chunks: noise only ever slows a chunk. The
    sums do not depend on the choice (_chunk_sums). Python threads sharing out the chunks were no faster than one
    thread: handing the GIL over costs about what an operation on a cached chunk does."""

    REPROBE = 64
    WINDOW = 3

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one sweep at a time sets torch's thread count
        self.seen: dict[int, list[float]] = {}  # thread count -> seconds per element of its last chunks
        self.chunks = 0
        self.most = 1
        self.current = 1

    @contextlib.contextmanager
    def running(self) -> Iterator["_Pace"]:
        with self.lock:
            # torch's native thread pool cannot be resized once it has run (it warns): choose only under OpenMP
            self.most = self.current = torch.get_num_threads() if "backend: OpenMP" in torch.__config__.parallel_info() else 1
            try:
                yield self
            finally:
                if self.current != self.most:
                    torch.set_num_threads(self.most)

    def chunk_starts(self) -> float:
        if self.most > 1:
            want = self._choose()
            if want != self.current:
                torch.set_num_threads(want)
                self.current = want
        return time.perf_counter()

    def chunk_done(self, start: float, elements: int) -> None:
        if self.most > 1:
            recent = self.seen.setdefault(self.current, [])
            recent.append((time.perf_counter() - start) / elements)
            del recent[: -self.WINDOW]

    def _choose(self) -> int:
        self.chunks += 1
        for n in (self.most, 1):
            if n not in self.seen:
                return n
        fast, slow = sorted((self.most, 1), key=lambda n: min(self.seen[n]))
        return slow if self.chunks % self.REPROBE == 0 else fast


_PACE = _Pace()


def _untrusted(rows: torch.Tensor, x: torch.Tensor, y: torch.Tensor, chunk: int, work: torch.dtype) -> list[int]:
    """Chunks whose `work`-precision sums cannot be trusted (see the module's docstring): they are summed again with
    exact_sums. A sum of squares of 0 is trusted only when its chunk holds zeros alone."""
    squares = rows[:, [SA, SB, SD]]
    ok = torch.isfinite(rows).all(1) & ((squares == 0) | (squares >= _MIN_SUM[work])).all(1)
    ok &= (rows[:, SD] > 0) | (rows[:, MAX_ABS] == 0)
    bad = [int(i) for i in torch.nonzero(~ok).flatten()]
    for i in torch.nonzero(ok & ((rows[:, SA] == 0) | (rows[:, SB] == 0))).flatten().tolist():
        s = i * chunk
        if (rows[i, SA] == 0 and bool(x[s: s + chunk].any())) or (rows[i, SB] == 0 and bool(y[s: s + chunk].any())):
            bad.append(i)
    return sorted(bad)


def exact_sums(x: torch.Tensor, y: torch.Tensor, rtol: float | torch.Tensor, atol: float | torch.Tensor,
               tiny: float | torch.Tensor) -> torch.Tensor:
    """(rows, WIDTH) float64 sums of each row of `x` against the same row of `y`, in float64, position by position:
    the same NaN at a position on both sides, or the same Inf, counts as equal; a NaN / Inf on one side only is a
    mismatch (and counted over tolerance); the other sums run over positions finite on both sides. rtol, atol and
    tiny are numbers or (rows, 1) tensors."""
    x, y = x.to(torch.float64), y.to(torch.float64)
    nan_x, nan_y, inf_x, inf_y = x.isnan(), y.isnan(), x.isinf(), y.isinf()
    same_special = (nan_x & nan_y) | (inf_x & inf_y & (x == y))
    finite = x.isfinite() & y.isfinite()
    xf, yf = torch.where(finite, x, 0.0), torch.where(finite, y, 0.0)
    diff = (xf - yf).abs()
    out = torch.empty(x.shape[0], WIDTH, dtype=torch.float64)
    out[:, N] = finite.sum(1)
    out[:, NAN] = (nan_x != nan_y).sum(1)
    out[:, INF] = ((inf_x | inf_y) & ~(nan_x | nan_y) & (x != y)).sum(1)
    out[:, OVER] = (diff > atol + rtol * yf.abs()).sum(1) + (~finite & ~same_special).sum(1)
    out[:, SA], out[:, SB] = (xf * xf).sum(1), (yf * yf).sum(1)
    out[:, SD], out[:, SAB] = (diff * diff).sum(1), (xf * yf).sum(1)
    if x.shape[1]:
        out[:, MAX_ABS] = diff.amax(1)
        out[:, MAX_REL] = (diff / yf.abs().clamp_min(tiny)).amax(1)
    else:
        out[:, MAX_ABS:] = 0.0
    return out
