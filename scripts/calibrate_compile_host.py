#!/usr/bin/env python3
"""The host's cost of a torch.compile'd step (default mode, Inductor) on a CUDA machine: per call of a compiled graph
and per kernel it launches, for the `mode=compile` step model (npuport/cost/timing.py, mappings/timing.yaml).

A compiled graph's Python wrapper launches each of its kernels in turn (a Triton kernel through its launcher, a GEMM
through the extern cuBLAS call) and allocates each output; dynamo's guards and AOTAutograd's wrapper run once per
call. Chains of K kernels on tiny tensors (the device finishes each kernel long before the host has launched the
next) give both as the line host(K) = graph_s + K x kernel_s:
- `mm`: K matmuls of [8, 8] (each an extern GEMM launch: Inductor cannot fuse them);
- `norm`: K centrings of a [64, 64] tensor along alternating dims, x - mean(x, 0) then x - mean(x, 1) (each a
  Triton reduction kernel: a reduction along the other dim needs the whole result before it, which one kernel
  cannot wait for; a chain along one dim fits one kernel and measured nothing on 2026-12-05);
- `train`: the `mm` chain with a weight that needs its gradient, forward and backward (two graphs per step, the
  backward's GEMMs twice the forward's), against the forward alone.
Each point: the host seconds from the call until it returned (the median of --calls calls), with the eager tiny-add
probe of npuport.profile.record taken before and after, so the costs can be scaled to another host's speed as the
eager ones are.

Usage (on the GPU machine): python scripts/calibrate_compile_host.py [-o OUT.json] [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from npuport.profile.record import host_probe  # noqa: E402

KS = (1, 4, 16, 64)


def _mm_chain(k: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(k):
            x = x @ w
        return x
    return f


def _norm_chain(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        for i in range(k):
            x = x - x.mean(i % 2, keepdim=True)
        return x
    return f


def _time(call: Callable[[], Any], calls: int) -> float:
    """Median host seconds of one call (until it returned), the device synchronized before each."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    out = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(out)


def _kernels(call: Callable[[], Any]) -> int:
    """Device kernels one call launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 - only here

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def _fit(points: dict[int, float]) -> tuple[float, float]:
    """Least-squares line through (K, seconds): (per graph call, per kernel)."""
    ks = list(points)
    n = len(ks)
    mx = sum(ks) / n
    my = sum(points.values()) / n
    slope = sum((k - mx) * (points[k] - my) for k in ks) / sum((k - mx) ** 2 for k in ks)
    return my - slope * mx, slope


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    dev = "cuda"
    x = torch.randn(8, 8, device=dev)
    w = torch.randn(8, 8, device=dev)
    wg = torch.randn(8, 8, device=dev, requires_grad=True)
    sq = torch.randn(64, 64, device=dev)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "points": {}}
    probes = [host_probe(dev)]
    for name in ("mm", "norm", "train_forward", "train"):
        pts: dict[int, float] = {}
        for k in KS:
            torch._dynamo.reset()
            if name == "mm":
                fm = torch.compile(_mm_chain(k), dynamic=False)
                pts[k] = _time(lambda: fm(x, w), args.calls)
            elif name == "norm":
                fn = torch.compile(_norm_chain(k), dynamic=False)
                pts[k] = _time(lambda: fn(sq), args.calls)
            elif name == "train_forward":
                ft = torch.compile(_mm_chain(k), dynamic=False)
                pts[k] = _time(lambda: ft(x, wg), args.calls)
            else:
                fb = torch.compile(_mm_chain(k), dynamic=False)

                def step() -> None:
                    fb(x, wg).sum().backward()
                    wg.grad = None
                pts[k] = _time(step, args.calls)
        graph_s, kernel_s = _fit(pts)
        result["points"][name] = {"k": list(pts), "host_s": list(pts.values()), "graph_s": graph_s, "kernel_s": kernel_s}
        if name == "norm":  # how many kernels the longest chain became: the fit means something only if K of them
            result["points"][name]["kernels_at_max_k"] = _kernels(lambda: fn(sq))
        print(f"{name:14s} per graph call {graph_s * 1e6:7.1f} us, per kernel {kernel_s * 1e6:6.2f} us "
              f"(K={list(pts)}: {', '.join(f'{v * 1e6:.0f}' for v in pts.values())} us)", flush=True)
    probes.append(host_probe(dev))
    result["probe_s"] = probes
    result["reference_probe_s"] = statistics.mean(probes)
    print(f"host probe {', '.join(f'{p * 1e6:.2f}' for p in probes)} us per tiny eager op")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
