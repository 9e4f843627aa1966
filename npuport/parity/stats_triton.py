"""The statistics of many tensors in two Triton launches, reading each tensor once (CUDA, Triton present).

Why: the batched torch path (stats.py) stacks each (dtype, numel) group, a full copy, then makes four reductions
over the copy; on an H200 that is about six passes over every captured byte, serialised after the forward. Here a
pointer table lets one launch read every queued tensor of a dtype in place, in chunks (min, max, float32 sum and sum
of squares, the int64 word sum per chunk), and a second launch folds the chunks of each tensor in
float64 and gathers its samples. The output rows have exactly the layout of `stats._packed_group`, so both paths
feed the same `StatsBatcher.finish()`; the tests on the GPU host check that both agree (checksums bit for bit).

Floating dtypes of 2 and 4 bytes (bf16, fp16, fp32: what a model's activations are) accumulate in float32 per chunk
and their checksum sums the raw words; integer and bool tensors (input ids, positions, masks) accumulate in float64
and their checksum sums the values, as the torch path does, so for them the two paths give the same rows (sums of
integers below 2**53 are exact in any order; tested). One reducer for a CUDA capture: on an H200 host the torch path
cost the two int64 inputs of a Llama forward 0.4-0.5 ms of host time per flush, their own table and launch pair here
about as much (docs/parity.md), so this is not a host saving. float64 tensors and tensors that are not contiguous
stay on the torch path.
"""

from __future__ import annotations

import contextlib
from itertools import accumulate
from typing import Any

import torch

try:  # Triton ships with CUDA builds of torch; CPU builds (CI) and torch_npu hosts may lack it.
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - exercised where triton is absent
    triton = None  # type: ignore[assignment]
    tl = None  # type: ignore[assignment]

from npuport.parity.stats_layout import FIELDS as _FIELDS
from npuport.parity.stats_layout import SAMPLE

CHUNK = 1 << 16  # elements one program reduces: ~20k programs for 2.7 GB of bf16, enough to fill 132 SMs
BLOCK = 2048  # elements per loop step of a program (8 warps: 8 bf16 a thread, one 16-byte load)
NUM_WARPS = 8
FOLD_BLOCK = 256
FLOATS = frozenset((torch.bfloat16, torch.float16, torch.float32))
INTEGERS = frozenset((torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool))
DTYPES = FLOATS | INTEGERS  # what packed_rows takes
_TL_DTYPE: dict[torch.dtype, Any] = {}
_WORD_DTYPE: dict[torch.dtype, Any] = {}
if tl is not None:
    _TL_DTYPE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32, torch.int64: tl.int64,
                 torch.int32: tl.int32, torch.int16: tl.int16, torch.int8: tl.int8, torch.uint8: tl.uint8,
                 torch.bool: tl.uint8}  # a bool is one byte of 0 or 1: the torch path reduces it as uint8 too
    _WORD_DTYPE = {torch.bfloat16: tl.int16, torch.float16: tl.int16, torch.float32: tl.int32}


if triton is not None:

    @triton.jit
    def _accumulate(x, lo, hi, s, sq, words, WORD: tl.constexpr, ACC: tl.constexpr, FACC: tl.constexpr, BITS: tl.constexpr):
        xf = x.to(FACC)
        # min/max ignore NaN (minnum); a NaN anywhere makes the sum of squares NaN (squares of the other values are
        # >= 0 or +inf and never sum to NaN), and the fold turns min and max into NaN from that.
        lo = tl.minimum(lo, xf)
        hi = tl.maximum(hi, xf)
        s += xf
        sq += xf * xf
        if BITS:  # a float's checksum sums its raw machine words
            words += x.to(WORD, bitcast=True).to(ACC)
        else:  # an integer's sums its values (sign- or zero-extended), as the torch path does
            words += x.to(ACC)
        return lo, hi, s, sq, words

    @triton.jit
    def _chunk_kernel(ptrs, numels, firsts, n_tensors, part_f, part_i,
                      DTYPE: tl.constexpr, WORD: tl.constexpr, ACC: tl.constexpr, FACC: tl.constexpr, BITS: tl.constexpr,
                      CHUNK_: tl.constexpr, BLOCK_: tl.constexpr):
        c = tl.program_id(0)
        # Which tensor this chunk belongs to: a binary search over the tensors' first chunks (20 steps: 1M tensors).
        lo_i = 0
        hi_i = n_tensors
        for _ in range(20):
            mid = (lo_i + hi_i) // 2
            ok = tl.load(firsts + mid) <= c
            lo_i = tl.where(ok, mid, lo_i)
            hi_i = tl.where(ok, hi_i, mid)
        t = lo_i
        n = tl.load(numels + t)
        start = (c - tl.load(firsts + t)).to(tl.int64) * CHUNK_
        base = tl.multiple_of(tl.load(ptrs + t).to(tl.pointer_type(DTYPE)), 16)  # the host routes unaligned tensors elsewhere
        offs = tl.arange(0, BLOCK_)
        lo = tl.full([BLOCK_], float("inf"), FACC)
        hi = tl.full([BLOCK_], float("-inf"), FACC)
        s = tl.zeros([BLOCK_], FACC)
        sq = tl.zeros([BLOCK_], FACC)
        words = tl.zeros([BLOCK_], ACC)
        if start + CHUNK_ <= n:  # a whole chunk: unmasked, vectorised loads
            for i in range(0, CHUNK_, BLOCK_):
                x = tl.load(base + start + i + offs)
                lo, hi, s, sq, words = _accumulate(x, lo, hi, s, sq, words, WORD, ACC, FACC, BITS)
        else:  # the tensor's last chunk; masked lanes read 0 (all-zero bits: no word sum) and are kept out of min/max
            for i in range(0, CHUNK_, BLOCK_):
                idx = start + i + offs
                m = idx < n
                x = tl.load(base + idx, mask=m, other=0)
                lo2, hi2, s, sq, words = _accumulate(x, lo, hi, s, sq, words, WORD, ACC, FACC, BITS)
                lo = tl.where(m, lo2, lo)
                hi = tl.where(m, hi2, hi)
        row = part_f + c * 4
        tl.store(row + 0, tl.min(lo, axis=0))
        tl.store(row + 1, tl.max(hi, axis=0))
        tl.store(row + 2, tl.sum(s, axis=0))
        tl.store(row + 3, tl.sum(sq, axis=0))
        tl.store(part_i + c, tl.sum(words.to(tl.int64), axis=0))

    @triton.jit
    def _fold_kernel(ptrs, numels, first_chunk, part_f, part_i, out,
                     DTYPE: tl.constexpr, CHUNK_: tl.constexpr, FOLD: tl.constexpr, NS: tl.constexpr, NF: tl.constexpr):
        t = tl.program_id(0)
        n = tl.load(numels + t)
        c0 = tl.load(first_chunk + t)
        nchunks = (n + CHUNK_ - 1) // CHUNK_
        offs = tl.arange(0, FOLD)
        lo = tl.full([FOLD], float("inf"), tl.float64)
        hi = tl.full([FOLD], float("-inf"), tl.float64)
        s = tl.zeros([FOLD], tl.float64)
        sq = tl.zeros([FOLD], tl.float64)
        words = tl.zeros([FOLD], tl.int64)
        for i in range(0, nchunks, FOLD):
            k = i + offs
            m = k < nchunks
            c = c0 + k
            lo = tl.minimum(lo, tl.load(part_f + c * 4 + 0, mask=m, other=float("inf")).to(tl.float64))
            hi = tl.maximum(hi, tl.load(part_f + c * 4 + 1, mask=m, other=float("-inf")).to(tl.float64))
            s += tl.load(part_f + c * 4 + 2, mask=m, other=0.0).to(tl.float64)
            sq += tl.load(part_f + c * 4 + 3, mask=m, other=0.0).to(tl.float64)
            words += tl.load(part_i + c, mask=m, other=0)
        total_sq = tl.sum(sq, axis=0)
        has_nan = total_sq != total_sq  # see _accumulate
        qnan = float("nan")
        vmin = tl.where(has_nan, qnan, tl.min(lo, axis=0))
        vmax = tl.where(has_nan, qnan, tl.max(hi, axis=0))
        row = out + t * NF
        tl.store(row + 0, vmin.to(tl.int64, bitcast=True))
        tl.store(row + 1, vmax.to(tl.int64, bitcast=True))
        tl.store(row + 2, tl.sum(s, axis=0).to(tl.int64, bitcast=True))
        tl.store(row + 3, tl.sqrt(total_sq).to(tl.int64, bitcast=True))
        base = tl.load(ptrs + t).to(tl.pointer_type(DTYPE))
        step = tl.maximum(n // NS, 1)
        j = tl.arange(0, NS)
        pos = j * step
        sm = pos < n
        smp = tl.load(base + pos, mask=sm, other=0).to(tl.float64)
        smp = tl.where(sm, smp, qnan)
        tl.store(row + 4 + j, smp.to(tl.int64, bitcast=True))
        tl.store(row + 4 + NS, tl.sum(words, axis=0))


def packed_rows(ptrs: list[int], numels: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(T, 4 + SAMPLE + 1) int64 rows, as `stats._packed_group` makes them, for contiguous, 16-byte aligned, non-empty
    tensors of one dtype in DTYPES on one device, given by data pointer and element count. The caller keeps each tensor
    alive until this returns; after that the allocator may reuse its memory, which is safe because every later use is
    queued on the same stream behind these launches. Returns without synchronising: one small host->device copy of the
    per-tensor table (pointer, numel, first chunk) from pinned memory, so it does not wait for the queue, and two
    launches."""
    t_count = len(ptrs)
    firsts = list(accumulate([(n + CHUNK - 1) // CHUNK for n in numels], initial=0))  # T + 1 values, the last = total
    total = firsts[-1]
    cuda = device.type == "cuda"
    table = torch.tensor(ptrs + numels + firsts, dtype=torch.int64, pin_memory=cuda)  # made pinned: no second copy
    dev_table = table.to(device, non_blocking=True) if cuda else table
    ptr_t, n_t, first_t = dev_table[:t_count], dev_table[t_count: 2 * t_count], dev_table[2 * t_count:]
    part_f = torch.empty(total, 4, dtype=torch.float32 if dtype in FLOATS else torch.float64, device=device)
    part_i = torch.empty(total, dtype=torch.int64, device=device)
    nf = _FIELDS + SAMPLE + 1
    out = torch.empty(t_count, nf, dtype=torch.int64, device=device)
    launch(ptr_t, n_t, first_t, t_count, total, part_f, part_i, out, dtype, device)
    return out


def launch(ptr_t: torch.Tensor, n_t: torch.Tensor, first_t: torch.Tensor, t_count: int, total: int, part_f: torch.Tensor,
           part_i: torch.Tensor, out: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
    """The two launches: per-chunk partials, then the per-tensor fold and samples."""
    tl_dtype = _TL_DTYPE[dtype]
    floating = dtype in FLOATS
    # 2-byte words: 32 per lane per chunk fit an int32 accumulator; 4-byte words and integer values need int64.
    acc = tl.int32 if floating and dtype.itemsize == 2 else tl.int64
    # Triton launches on the current device; switching costs two runtime calls, so only when it differs.
    switch = device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device()
    with torch.cuda.device(device) if switch else contextlib.nullcontext():
        _chunk_kernel[(total,)](ptr_t, n_t, first_t, t_count, part_f, part_i, DTYPE=tl_dtype,
                                WORD=_WORD_DTYPE.get(dtype, tl.int64), ACC=acc, FACC=tl.float32 if floating else tl.float64,
                                BITS=floating, CHUNK_=CHUNK, BLOCK_=BLOCK, num_warps=NUM_WARPS)
        _fold_kernel[(t_count,)](ptr_t, n_t, first_t, part_f, part_i, out, DTYPE=tl_dtype, CHUNK_=CHUNK,
                                 FOLD=FOLD_BLOCK, NS=SAMPLE, NF=out.shape[1], num_warps=4)
