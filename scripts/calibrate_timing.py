#!/usr/bin/env python3
"""Measure what the step-time model of mappings/timing.yaml needs on one device: achieved efficiency per op class
(GEMM, attention, elementwise, reduction, copy / cast, concatenation) against the chip's peak rates, the device's
floor per kernel, and the host's cost per eager op call. The numbers come from microbenchmarks of their own, not
from the models the step-time check (scripts/profile_check.py) is then held against.

Usage (on the lent H200: python3 scripts/calibrate_timing.py --chip H200 -o calibration.json):
    python scripts/calibrate_timing.py --chip H200 [--device cuda] -o OUT.json

Timing: device events around each run, median of `reps` runs after warm-up (device work); host cost: wall time of a
Python loop of tiny ops divided by the op count, with a synchronize at the end only (host work); and per
microbenchmark on a GPU its own host issue time per eager call, and how much it costs beyond a tiny add's in tiny
adds (host_extra: what an op of the class costs the host above the cheapest op).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F  # noqa: N812

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.cost.roofline import get_chip  # noqa: E402


def device_time(fn: Callable[[], Any], dev: str, reps: int = 20, warm: int = 3, per_graph: int = 10) -> float:
    """Median seconds of one fn() on the device, after warm-up. On a GPU `per_graph` calls are captured in a CUDA
    graph and its replays timed with events: the host's launch cost (which eager timing of a small op measures
    instead of the kernel) stays out, the back-to-back gap between kernels stays in."""
    for _ in range(warm):
        fn()
    if dev != "cpu":
        LAST["host_s"], LAST["host_extra"] = host_issue(fn, dev)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(g):
            for _ in range(per_graph):
                fn()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / per_graph)
        # the kernels' own durations (CUPTI, as a profile records them): replay time minus these is the gap between
        # back-to-back kernels, which a profile's per-op kernel time leaves out and a step's wall time holds
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
        kern = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total) * 1e-6
        LAST["kernel_s"] = kern / (3 * per_graph) if kern else None
        del g
        return statistics.median(times)
    if dev == "cpu":
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    raise AssertionError("unreachable")


# of the last device_time() run: CUPTI kernel time per call, host issue time per call, host cost beyond a tiny add's
LAST: dict[str, float | None] = {"kernel_s": None, "host_s": None, "host_extra": None}
HOST_CALLS = 10  # calls per host timing: far fewer than the launch queue holds, so the host never waits for it


def host_issue(fn: Callable[[], Any], dev: str, repeats: int = 7) -> tuple[float, float]:
    """Host seconds per eager call of fn (the time until the calls returned, device work still queued), and what it
    costs beyond a tiny add timed the same way right after it, in tiny adds: the op's own host cost above the
    cheapest eager op, read in the same moment and as a ratio so that a host whose speed moves within the run
    (docs/profile.md) cancels out."""
    tiny = torch.ones(8, device=dev)
    own, extra = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        for _ in range(HOST_CALLS):
            torch.add(tiny, tiny)
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        own.append((t1 - t0) / HOST_CALLS)
        extra.append((t1 - t0) / (t3 - t2) - 1.0)
    return statistics.median(own), statistics.median(extra)


def rnd(shape: tuple[int, ...], dtype: torch.dtype, dev: str) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=dev)  # never zeros: they can run faster than real data


def row(cls: str, name: str, t: float, flops: float, nbytes: float, chip: Any, matrix: bool, dtype: str) -> dict[str, Any]:
    peak = chip.peak_flops(dtype, matrix)
    ct, mt = flops / peak, nbytes / chip.memory_bandwidth
    bound = "compute" if ct >= mt else "memory"
    roof = max(ct, mt)
    kernel_s, LAST["kernel_s"] = LAST["kernel_s"], None
    host_s, LAST["host_s"] = LAST["host_s"], None
    host_extra, LAST["host_extra"] = LAST["host_extra"], None
    return {"class": cls, "name": name, "time_s": t, "kernel_s": kernel_s, "host_s": host_s,
            "host_extra": host_extra, "flops": flops, "bytes": nbytes, "bound": bound, "roofline_s": roof,
            "efficiency": roof / t if t else None}


def rotating(make: Callable[[], tuple], call: Callable[..., Any], nbytes: float) -> Callable[[], Any]:
    """fn() cycling over several input sets when one set is large: the device's 50 MB L2 would otherwise serve
    every replay of a mid-sized op from cache (the KV cache a decode step reads is cold in a real step)."""
    k = 1 if nbytes < (1 << 20) else min(10, max(2, math.ceil(3 * L2_BYTES / nbytes)))
    sets = [make() for _ in range(k)]
    it = itertools.cycle(sets)
    return lambda: call(*next(it))


L2_BYTES = 50e6


def gemms(dev: str, chip: Any) -> list[dict[str, Any]]:
    out = []
    dt = torch.bfloat16
    for (k, n) in ((4096, 4096), (4096, 11008), (11008, 4096), (2048, 2048), (2048, 50304), (1024, 2048), (4096, 32000)):
        for m in (1, 8, 64, 512, 2048, 8192, 16384):
            nb = 2.0 * (m * k + k * n + m * n)
            fn = rotating(lambda m=m, k=k, n=n: (rnd((m, k), dt, dev), rnd((k, n), dt, dev)), torch.mm, nb)
            out.append(row("matmul", f"mm {m}x{k} @ {k}x{n}", device_time(fn, dev), 2.0 * m * k * n, nb, chip, True, "bfloat16"))
    return out


def attention(dev: str, chip: Any) -> list[dict[str, Any]]:
    out = []
    dt = torch.bfloat16
    for (h, s, d) in ((32, 2048, 128), (16, 2048, 128), (32, 512, 128), (16, 4096, 128)):
        nb = 2.0 * 4 * h * s * d
        fn = rotating(lambda h=h, s=s, d=d: tuple(rnd((1, h, s, d), dt, dev) for _ in range(3)),
                      lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), nb)
        out.append(row("attention", f"sdpa causal 1x{h}x{s}x{d}", device_time(fn, dev), 4.0 * h * s * s * d / 2, nb, chip, True, "bfloat16"))
    for (h, s, d) in ((32, 2049, 128), (16, 2049, 128), (32, 8193, 128)):
        nb = 2.0 * (2 * h * s * d + 2 * h * d)
        fn = rotating(lambda h=h, s=s, d=d: (rnd((1, h, 1, d), dt, dev), rnd((1, h, s, d), dt, dev), rnd((1, h, s, d), dt, dev)),
                      F.scaled_dot_product_attention, nb)
        out.append(row("attention", f"sdpa decode 1x{h}x1x{d} over {s}", device_time(fn, dev), 4.0 * h * s * d, nb, chip, True, "bfloat16"))
    if dev != "cpu":
        out += attention_backward(dev, chip)
    return out


def attention_backward(dev: str, chip: Any) -> list[dict[str, Any]]:
    """The causal attention backward, its own kernels (dQ, dK, dV from a recomputed score matrix): timed eagerly as
    autograd runs it, its CUPTI kernel time per call the number fit (a backward is not captured in a graph here).
    FLOPs as the audit counts them: 2.5x the forward; bytes: q, k, v, out, grad out read, three gradients written."""
    out = []
    dt = torch.bfloat16
    for (h, s, d) in ((32, 2048, 128), (16, 2048, 128), (32, 512, 128), (16, 4096, 128)):
        q, k, v = (rnd((1, h, s, d), dt, dev).requires_grad_() for _ in range(3))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        go = torch.randn_like(o)

        def bwd(o: torch.Tensor = o, go: torch.Tensor = go, q: torch.Tensor = q, k: torch.Tensor = k,
                v: torch.Tensor = v) -> Any:
            return torch.autograd.grad(o, (q, k, v), go, retain_graph=True)

        for _ in range(3):
            bwd()
        LAST["host_s"], LAST["host_extra"] = host_issue(bwd, dev)
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            bwd()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                bwd()
            torch.cuda.synchronize()
        kern = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total) * 1e-6
        LAST["kernel_s"] = kern / 3 if kern else None
        out.append(row("attention", f"sdpa causal backward 1x{h}x{s}x{d}", statistics.median(times),
                       2.5 * 4.0 * h * s * s * d / 2, 2.0 * 8 * h * s * d, chip, True, "bfloat16"))
    return out


def vector(dev: str, chip: Any) -> list[dict[str, Any]]:
    out = []
    bf, f32 = torch.bfloat16, torch.float32
    for n in (2048, 4096, 16384, 65536, 1 << 20, 1 << 23, 1 << 26):
        r, c = max(n // 4096, 1), min(n, 4096)
        cases = [
            ("elementwise", f"add bf16 {n}", lambda n=n: (rnd((n,), bf, dev), rnd((n,), bf, dev)), torch.add, n, 6.0 * n, "bfloat16"),
            ("elementwise", f"silu bf16 {n}", lambda n=n: (rnd((n,), bf, dev),), F.silu, 4.0 * n, 4.0 * n, "bfloat16"),
            ("elementwise", f"mul fp32 {n}", lambda n=n: (rnd((n,), f32, dev), rnd((n,), f32, dev)), torch.mul, n, 12.0 * n, "float32"),
            ("copy", f"cast bf16->fp32 {n}", lambda n=n: (rnd((n,), bf, dev),), lambda a: a.float(), 0.0, 6.0 * n, "bfloat16"),
            ("copy", f"cast fp32->bf16 {n}", lambda n=n: (rnd((n,), f32, dev),), lambda a: a.to(bf), 0.0, 6.0 * n, "float32"),
            # the broadcasts of a norm: x * rsqrt(var) per row (fp32), weight * x per column (bf16)
            ("elementwise", f"mul fp32 {r}x{c} by a column", lambda r=r, c=c: (rnd((r, c), f32, dev), rnd((r, 1), f32, dev)),
             torch.mul, 1.0 * n, 8.0 * n + 4.0 * r, "float32"),
            ("elementwise", f"mul bf16 {r}x{c} by a row", lambda r=r, c=c: (rnd((r, c), bf, dev), rnd((c,), bf, dev)),
             torch.mul, 1.0 * n, 4.0 * n + 2.0 * c, "bfloat16"),
            ("elementwise", f"mul fp32 {r}x{c} by a row", lambda r=r, c=c: (rnd((r, c), f32, dev), rnd((c,), f32, dev)),
             torch.mul, 1.0 * n, 8.0 * n + 4.0 * c, "float32"),
            ("elementwise", f"mul bf16 {r}x{c} by a column", lambda r=r, c=c: (rnd((r, c), bf, dev), rnd((r, 1), bf, dev)),
             torch.mul, 1.0 * n, 4.0 * n + 2.0 * r, "bfloat16"),
            ("strided_copy", f"contiguous of a transpose {r}x{c}", lambda r=r, c=c: (rnd((c, r), bf, dev).t(),), lambda a: a.contiguous(), 0.0, 4.0 * n, "bfloat16"),
            ("copy", f"clone bf16 {n}", lambda n=n: (rnd((n,), bf, dev),), torch.clone, 0.0, 4.0 * n, "bfloat16"),
            ("reduction", f"mean fp32 {r}x{c}", lambda r=r, c=c: (rnd((r, c), f32, dev),), lambda a: a.mean(-1, keepdim=True), 1.0 * n, 4.0 * n + 4.0 * r, "float32"),
            ("reduction", f"softmax fp32 {r}x{c}", lambda r=r, c=c: (rnd((r, c), f32, dev),), lambda a: torch.softmax(a, -1), 5.0 * n, 8.0 * n, "float32"),
        ]
        for cls, name, make, call, flops, nb, dtype in cases:
            out.append(row(cls, name, device_time(rotating(make, call, nb), dev), flops, nb, chip, False, dtype))
    for (h, s, d) in ((32, 2048, 128), (16, 2048, 128), (4, 2048, 64), (32, 512, 128), (8, 8192, 128), (32, 8192, 128)):
        nb = 2.0 * (2 * h * s * d + 2 * h * d)
        fn = rotating(lambda h=h, s=s, d=d: (rnd((1, h, s, d), bf, dev), rnd((1, h, 1, d), bf, dev)),
                      lambda past, new: torch.cat([past, new], dim=-2), nb)
        out.append(row("cat", f"kv cat 1x{h}x{s}x{d} + 1 token", device_time(fn, dev), 0.0, nb, chip, False, "bfloat16"))
    return out


def strided(dev: str, chip: Any) -> list[dict[str, Any]]:
    """Ops whose inputs are strided views, as a transformer's attention makes them: the rotary multiply of a
    head-transposed view, the concatenation of two halves of the last dim, the copy back to token-major layout."""
    out = []
    bf = torch.bfloat16
    for (s_, h, d) in ((2048, 32, 128), (2048, 16, 128), (512, 32, 128), (2048, 4, 64), (8192, 32, 128)):
        n = s_ * h * d
        cases = [
            # bytes as the audit counts them: the broadcast operand (1, 1, S, D) is read once
            ("rotary mul of a transposed view", lambda: (rnd((1, s_, h, d), bf, dev).transpose(1, 2), rnd((1, 1, s_, d), bf, dev)),
             torch.mul, n, 4.0 * n + 2.0 * s_ * d),
            ("mul by a 1x1xSxD (over heads)", lambda: (rnd((1, h, s_, d), bf, dev), rnd((1, 1, s_, d), bf, dev)),
             torch.mul, n, 4.0 * n + 2.0 * s_ * d),
            ("cat of the halves of the last dim", lambda: (rnd((1, h, s_, d), bf, dev),),
             lambda x: torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1), 0.0, 4.0 * n),
            ("contiguous of a head transpose", lambda: (rnd((1, h, s_, d), bf, dev).transpose(1, 2),),
             lambda x: x.contiguous(), 0.0, 4.0 * n),
        ]
        for name, make, call, flops, nb in cases:
            cls = ("strided_cat" if name.startswith("cat") else "strided_copy" if name.startswith("contiguous")
                   else "elementwise" if "over heads" in name else "strided")
            out.append(row(cls, f"{name} 1x{h}x{s_}x{d}", device_time(rotating(make, call, nb), dev), flops, nb,
                           chip, False, "bfloat16"))
    # small strided views as an MoE's decode step makes them: the activation of the gate half of a fused gate-up
    # projection (a slice of every row), the negation of one half of a head's rotary dims
    for (r, c) in ((2, 1024), (8, 1024), (8, 14336), (2048, 1024), (16384, 1024)):  # one row would be dense
        n = r * c
        out.append(row("strided", f"silu of the first half of {r}x{2 * c}", device_time(rotating(
            lambda r=r, c=c: (rnd((r, 2 * c), bf, dev),), lambda x, c=c: F.silu(x[:, :c]), 4.0 * n), dev),
            4.0 * n, 4.0 * n, chip, False, "bfloat16"))
    for (h, s_, d) in ((16, 1, 128), (32, 1, 128), (16, 2048, 128)):
        n = h * s_ * d // 2
        out.append(row("strided", f"neg of the second half of 1x{h}x{s_}x{d}", device_time(rotating(
            lambda h=h, s_=s_, d=d: (rnd((1, h, s_, d), bf, dev),), lambda x, d=d: -x[..., d // 2:], 4.0 * n), dev),
            1.0 * n, 4.0 * n, chip, False, "bfloat16"))
    return out


def outer_reductions(dev: str, chip: Any) -> list[dict[str, Any]]:
    """Reductions along a dim that is not the innermost (an MoE summing its top-k experts' outputs per token: [T, k, H]
    over k), another kernel configuration than a row reduction: the class variant `reduction_outer`."""
    out = []
    bf = torch.bfloat16
    for (t, k, hid) in ((1, 8, 2048), (8, 8, 2048), (2048, 8, 2048), (1, 2, 4096), (4096, 2, 4096), (16384, 8, 1024)):
        n = t * k * hid
        out.append(row("reduction_outer", f"sum bf16 {t}x{k}x{hid} over dim 1", device_time(rotating(
            lambda t=t, k=k, hid=hid: (rnd((t, k, hid), bf, dev),), lambda x: x.sum(dim=1), 2.0 * n), dev),
            1.0 * n, 2.0 * n + 2.0 * t * hid, chip, False, "bfloat16"))
    return out


def moe(dev: str, chip: Any) -> list[dict[str, Any]]:
    """What a mixture-of-experts layer runs besides its GEMMs' dense kin: grouped GEMM, sort / top-k routing,
    gathering rows by index and adding them back."""
    out = []
    bf = torch.bfloat16
    grouped = getattr(torch, "_grouped_mm", None)
    gen = torch.Generator().manual_seed(0)
    for (g, k, n, m, top) in ((64, 2048, 1024, 16384, 8), (64, 2048, 2048, 16384, 8), (64, 1024, 2048, 16384, 8),
                              (64, 2048, 1024, 8, 8), (8, 4096, 14336, 4096, 2), (8, 4096, 14336, 2, 2),
                              (128, 4096, 1536, 32768, 8)):
        if grouped is None or dev == "cpu":
            break
        active = min(g, m)  # experts that get a row: the only weights read
        nb = 2.0 * (m * k + active * k * n + m * n)
        if m < g:
            # a decode token's top-k: every row in its own group
            offs = torch.tensor([min(i + 1, m) for i in range(g)], dtype=torch.int32, device=dev)
        else:
            # rows as a router spreads them: each of m / top tokens picks `top` distinct experts at random (what a
            # random-initialised router does, and roughly a trained one kept balanced), so the groups' sizes vary
            # around m / g and the kernel pays for its partly filled tiles; rows split evenly are timed for reference
            even = torch.tensor([round(m * (i + 1) / g) for i in range(g)], dtype=torch.int32, device=dev)
            fn = rotating(lambda g=g, k=k, n=n, m=m: (rnd((m, k), bf, dev), rnd((g, k, n), bf, dev)),
                          lambda a, b, offs=even: grouped(a, b, offs=offs), nb)
            out.append(row("grouped_matmul", f"grouped_mm {m}x{k} @ {g}x{k}x{n} (rows even)", device_time(fn, dev),
                           2.0 * m * k * n, nb, chip, True, "bfloat16"))
            picks = torch.rand((m // top, g), generator=gen).topk(top, dim=-1).indices.flatten()
            offs = torch.bincount(picks, minlength=g).cumsum(0).to(torch.int32).to(dev)
        fn = rotating(lambda g=g, k=k, n=n, m=m: (rnd((m, k), bf, dev), rnd((g, k, n), bf, dev)),
                      lambda a, b, offs=offs: grouped(a, b, offs=offs), nb)
        out.append(row("grouped_matmul", f"grouped_mm {m}x{k} @ {g}x{k}x{n}", device_time(fn, dev), 2.0 * m * k * n, nb,
                       chip, True, "bfloat16"))
        if m < g:
            continue
        # the layouts a transformers MoE runs: expert weights stored (G, N, K) and used transposed in the forward,
        # and the weight gradient, grouped along K: (K, M) (a transposed view of the activations) x (M, N)
        fn = rotating(lambda g=g, k=k, n=n, m=m: (rnd((m, k), bf, dev), rnd((g, n, k), bf, dev).transpose(1, 2)),
                      lambda a, b, offs=offs: grouped(a, b, offs=offs), nb)
        out.append(row("grouped_matmul", f"grouped_mm {m}x{k} @ {g}x{k}x{n} (weights transposed)", device_time(fn, dev),
                       2.0 * m * k * n, nb, chip, True, "bfloat16"))
        nbw = 2.0 * (k * m + m * n + g * k * n)
        fn = rotating(lambda k=k, n=n, m=m: (rnd((m, k), bf, dev).t(), rnd((m, n), bf, dev)),
                      lambda a, b, offs=offs: grouped(a, b, offs=offs), nbw)
        out.append(row("grouped_matmul", f"grouped_mm weight gradient {k}x{m} @ {m}x{n} into {g} groups",
                       device_time(fn, dev), 2.0 * m * k * n, nbw, chip, True, "bfloat16"))
    for (t, e, k) in ((2048, 64, 8), (1, 64, 8), (4096, 128, 8), (2048, 8, 2)):
        # the router's reductions: a softmax over the experts, the top-k weights normalised by their sum
        n = t * e
        out.append(row("reduction", f"softmax fp32 {t}x{e} (router)", device_time(rotating(
            lambda t=t, e=e: (rnd((t, e), torch.float32, dev),), lambda a: torch.softmax(a, -1), 8.0 * n), dev),
            5.0 * n, 8.0 * n, chip, False, "float32"))
        out.append(row("reduction", f"sum fp32 {t}x{k} (top-k weights)", device_time(rotating(
            lambda t=t, k=k: (rnd((t, k), torch.float32, dev),), lambda a: a.sum(-1, keepdim=True), 4.0 * t * k), dev),
            1.0 * t * k, 4.0 * t * k + 4.0 * t, chip, False, "float32"))
        logits = rnd((t, e), torch.float32, dev)
        out.append(row("sort", f"topk {t}x{e} k={k}", device_time(lambda lg=logits, k=k: torch.topk(lg, k, dim=-1), dev),
                       0.0, 4.0 * t * e + 12.0 * t * k, chip, False, "float32"))
        idx = torch.randint(0, e, (t * k,), device=dev)
        out.append(row("sort", f"sort {t * k} expert ids", device_time(lambda i=idx: torch.sort(i), dev), 0.0,
                       24.0 * t * k, chip, False, "float32"))
    for (rows_, hid, picks) in ((2048, 2048, 16384), (1, 2048, 8), (4096, 4096, 32768), (2048, 4096, 4096)):
        nb = 2.0 * 2 * picks * hid + 8.0 * picks
        fn = rotating(lambda r=rows_, h=hid, p=picks: (rnd((r, h), bf, dev), torch.randint(0, r, (p,), device=dev)),
                      lambda x, i: x[i], nb)
        out.append(row("gather", f"index rows {picks} of {rows_}x{hid}", device_time(fn, dev), 0.0, nb, chip, False, "bfloat16"))
        nb2 = 2.0 * 3 * picks * hid + 8.0 * picks
        fn2 = rotating(lambda r=rows_, h=hid, p=picks: (rnd((r, h), bf, dev), torch.randint(0, r, (p,), device=dev),
                                                        rnd((p, h), bf, dev)),
                       lambda x, i, v: x.index_add(0, i, v), nb2)
        out.append(row("scatter", f"index_add {picks} rows into {rows_}x{hid}", device_time(fn2, dev), picks * hid, nb2,
                       chip, False, "bfloat16"))
        # the backward of x[i] (index_put with accumulate, out of place) and a plain indexed store, bytes as the
        # audit counts them: self, indices, values, output
        nb3 = 2.0 * (2 * rows_ * hid + picks * hid) + 8.0 * picks
        fn3 = rotating(lambda r=rows_, h=hid, p=picks: (rnd((r, h), bf, dev), torch.randint(0, r, (p,), device=dev),
                                                        rnd((p, h), bf, dev)),
                       lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), nb3)
        out.append(row("scatter", f"index_put accumulate {picks} rows into {rows_}x{hid}", device_time(fn3, dev),
                       picks * hid, nb3, chip, False, "bfloat16"))
    # the backward of a permutation (an MoE's tokens sorted by expert and back): as many indices as rows, none
    # repeated, so nothing accumulates serially as it does where many indices hit one row
    for (rows_, hid) in ((16384, 2048), (2048, 4096), (32768, 4096), (8, 2048)):
        nb3 = 2.0 * (3 * rows_ * hid) + 8.0 * rows_
        fn3 = rotating(lambda r=rows_, h=hid: (rnd((r, h), bf, dev), torch.randperm(r, device=dev), rnd((r, h), bf, dev)),
                       lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), nb3)
        out.append(row("scatter", f"index_put accumulate {rows_} rows into {rows_}x{hid} (a permutation)",
                       device_time(fn3, dev), rows_ * hid, nb3, chip, False, "bfloat16"))
    for n in (8, 2048, 16384, 1 << 20):
        nb4 = 4.0 * 3 * n + 8.0 * n
        fn4 = rotating(lambda n=n: (rnd((n,), torch.float32, dev), torch.randperm(n, device=dev), rnd((n,), torch.float32, dev)),
                       lambda x, i, v: x.index_put_((i,), v), nb4)
        out.append(row("scatter", f"index_put_ store {n} of {n}", device_time(fn4, dev), 0.0, nb4, chip, False, "float32"))
    return out


def floors(dev: str) -> dict[str, Any]:
    """Host cost per eager op call, and the device's time per back-to-back tiny kernel (its floor)."""
    x = rnd((8,), torch.bfloat16, dev)
    lin = torch.nn.Linear(8, 8, device=dev, dtype=torch.bfloat16)
    n = 4000

    def host_loop(fn: Callable[[], Any]) -> float:
        for _ in range(200):
            fn()
        if dev != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if dev != "cpu":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    res: dict[str, Any] = {
        "host_per_compute_op_s": statistics.median(host_loop(lambda: torch.add(x, x)) for _ in range(5)),
        "host_per_view_op_s": statistics.median(host_loop(lambda: x.view(2, 4)) for _ in range(5)),
        "host_per_linear_module_s": statistics.median(host_loop(lambda: lin(x)) for _ in range(5)),
    }
    if dev != "cpu":
        y = x.clone()
        res["device_floor_per_kernel_s"] = device_time(lambda: y.add_(1), dev, reps=10, per_graph=1000)
        res["device_floor_how"] = "a CUDA graph of 1000 dependent tiny adds, replay time / 1000"
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", required=True, help="the hardware.yaml chip whose peaks the efficiencies are against")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    chip = get_chip(args.chip)
    dev = args.device
    rows = (gemms(dev, chip) + attention(dev, chip) + vector(dev, chip) + strided(dev, chip)
            + outer_reductions(dev, chip) + moe(dev, chip))
    data = {"chip": chip.name, "device": dev,
            "device_name": torch.cuda.get_device_name() if dev != "cpu" else "cpu",
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "floors": floors(dev), "rows": rows}
    Path(args.output).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{'class':<12} {'name':<44} {'time':>10} {'bound':>8} {'eff':>6}")
    for r in rows:
        print(f"{r['class']:<12} {r['name']:<44} {r['time_s'] * 1e6:>8.1f}us {r['bound']:>8} {r['efficiency']:>6.2f}")
    print(json.dumps(data["floors"], indent=1))


if __name__ == "__main__":
    main()
