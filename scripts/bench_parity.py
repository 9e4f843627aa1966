#!/usr/bin/env python3
"""Parity capture overhead, artifact size and compare throughput.

Target (issue 6): `--stats-only` capture at most 1.3x a plain forward at batch 1 x 2048 tokens on a ~1B-parameter
config (TinyLlama-1.1B shape, bf16, forward only) on the GPU. Each variant is timed as the median of --repeats
passes after --warmup passes (host clock around device synchronize), all in one process, plain forward
re-measured between variants so ratios compare like with like.

Usage: python scripts/bench_parity.py [--device cuda] [--config examples/configs/tinyllama-1.1b.json]
       [--dtype bfloat16] [--seq 2048] [--json OUT.json] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from npuport.devices.device import parse_device  # noqa: E402
from npuport.parity.capture import Capturer, run_capture  # noqa: E402
from npuport.parity.compare import compare  # noqa: E402
from npuport.parity.entries import CaptureOptions  # noqa: E402
from npuport.parity.run import record  # noqa: E402
from npuport.parity.session import RunOptions, Target, device_inputs, modes_for, place, prepare  # noqa: E402
from npuport.parity.stats import StatsBatcher, StatsTable  # noqa: E402
from npuport.parity.tolerances import load_tolerances  # noqa: E402


def paired(plain: Callable[[], Any], fn: Callable[[], Any], sync: Callable[[], None], warmup: int, repeats: int) -> dict[str, Any]:
    """Plain forward and captured step alternated, `repeats` pairs: each pair sees the same machine state (clocks,
    other tenants), so the median of the pairs' ratios is robust to drift that separate runs would fold in."""
    for _ in range(warmup):
        plain()
        fn()
    ps, cs = [], []
    for _ in range(repeats):
        for f, into in ((plain, ps), (fn, cs)):
            sync()
            t0 = time.perf_counter()
            f()
            sync()
            into.append(time.perf_counter() - t0)
    ratios = [c / p for p, c in zip(ps, cs)]
    return {"plain_ms": statistics.median(ps) * 1e3, "capture_ms": statistics.median(cs) * 1e3,
            "ratio": statistics.median(ratios), "ratio_of_medians": statistics.median(cs) / statistics.median(ps),
            "plain_all_ms": [round(t * 1e3, 2) for t in ps], "capture_all_ms": [round(t * 1e3, 2) for t in cs]}


def timed(fn: Callable[[], Any], sync: Callable[[], None], warmup: int, repeats: int) -> dict[str, Any]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return {"median_ms": statistics.median(times) * 1e3, "all_ms": [round(t * 1e3, 2) for t in times]}


def naive_stats(module: torch.nn.Module) -> Callable[[], None]:
    """The baseline from facts/parity-anchors.md: a hook per module, .float() then 4 reductions per tensor. Returns
    one captured forward (hooks attached for it only, so paired() can alternate it with the plain forward)."""
    out: list[torch.Tensor] = []

    def hook(mod: Any, args: Any, result: Any) -> None:
        ts = [result] if isinstance(result, torch.Tensor) else [t for t in (result if isinstance(result, tuple) else getattr(result, "values", lambda: [])()) if isinstance(t, torch.Tensor)]
        for t in ts:
            f = t.float()
            out.append(torch.stack([f.amin(), f.amax(), f.mean(), f.norm()]))

    def step() -> None:
        handles = [m.register_forward_hook(hook) for m in module.modules()]
        try:
            with torch.no_grad():
                module(*ARGS[0], **ARGS[1])
        finally:
            for h in handles:
                h.remove()
        if out:
            torch.stack(out).cpu()
        out.clear()
    return step


ARGS: list[Any] = []


class _Skip(Exception):
    """--overhead-only: leave the artifact and compare measurements out."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", default=str(ROOT / "examples" / "configs" / "tinyllama-1.1b.json"))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--compare-seq", type=int, default=512, help="sequence length of the full captures used for compare throughput")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=15, help="plain/capture pairs per variant")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--scratch", help="folder for artifacts (default: a temp dir, removed)")
    ap.add_argument("--overhead-only", action="store_true", help="time the capture variants only (no artifact size or compare rate)")
    args = ap.parse_args()

    dev = parse_device(args.device)
    dev.check_present()
    target = Target(hf_config=args.config, dtype=args.dtype)
    opts = RunOptions(scenario=f"prefill:batch=1,seq={args.seq}")
    t0 = time.perf_counter()
    prep = prepare(target, opts)
    build_s = time.perf_counter() - t0
    dev.set_numerics_policy(opts.policy)
    module = place(prep, dev)
    inputs = device_inputs(prep.inputs, dev)
    a, kw = inputs["args"], inputs["kwargs"]
    res: dict[str, Any] = {"device": dev.versions(), "config": Path(args.config).name, "dtype": args.dtype, "seq": args.seq,
                           "parameters": prep.lm.parameters, "build_s": build_s, "variants": {}}

    def plain() -> None:
        with torch.no_grad():
            module(*a, **kw)

    def capture(**o: Any) -> Callable[[], Any]:
        """One-shot: hooks attached and removed around the step (what `parity record` does once)."""
        co = CaptureOptions(**o)
        return lambda: run_capture(module, a, kw, co, modes_for(dev), dev.synchronize)

    def steady(**o: Any) -> Callable[[], Any]:
        """Per step with hooks attached once (capturing every step of a loop)."""
        return lambda: STEADY[0].step(a, kw)

    STEADY: list[Any] = []
    variants: list[tuple[str, Callable[[], Any], dict[str, Any] | None]] = [
        ("stats_only", steady(), {"mode": "stats", "op_sequence": False}),
        ("stats_only_one_shot", capture(mode="stats", op_sequence=False), None),
        ("stats_only_torch_statistics", steady(), {"mode": "stats", "op_sequence": False, "stats_kernel": "torch"}),
        # diagnostic: the lean recorder with the statistics switched off (what the host spends on recording alone)
        ("stats_only_recorder_only", steady(), {"mode": "stats", "op_sequence": False}),
        # diagnostics: the statistics queue's budget (default: from free memory, 8 GiB on an idle H200) decides how
        # many flushes a step makes; 1 GiB was the fixed default before
        ("stats_only_budget_1g", steady(), {"mode": "stats", "op_sequence": False, "budget_bytes": 1 << 30}),
        ("stats_only_budget_256m", steady(), {"mode": "stats", "op_sequence": False, "budget_bytes": 256 << 20}),
        ("stats_only_op_sequence", steady(), {"mode": "stats", "op_sequence": True}),
        ("stats_only_ops", steady(), {"mode": "stats", "ops": True, "op_sequence": True}),
    ]
    for name, fn, persistent in variants:
        holder = Capturer(module, CaptureOptions(**persistent), modes_for(dev), dev.synchronize) if persistent else None
        if holder is not None:
            holder.__enter__()
            STEADY[:] = [holder]
        saved = StatsBatcher.add, StatsBatcher.flush, StatsBatcher.finish
        if name == "stats_only_recorder_only":
            StatsBatcher.add = lambda self, blob, t, version=None: False  # type: ignore[method-assign]
            StatsBatcher.flush = lambda self: None  # type: ignore[method-assign]
            StatsBatcher.finish = lambda self: StatsTable.empty()  # type: ignore[method-assign]
        try:  # the plain forward runs with the capturer attached but idle: that is what a training loop pays between captures
            dev.reset_memory_peak()
            got = paired(plain, fn, dev.synchronize, args.warmup, args.repeats)
            got["peak_device_bytes"] = dev.memory_peak()  # the variant's own peak (plain forwards included)
        finally:
            StatsBatcher.add, StatsBatcher.flush, StatsBatcher.finish = saved  # type: ignore[method-assign]
            if holder is not None:
                holder.__exit__(None, None, None)
        got["recorder"] = ("lean" if holder.lean else "hooks") if holder is not None else "lean"
        res["variants"][name] = got
        peak = f", peak {got['peak_device_bytes'] / 2**30:.2f} GiB" if got["peak_device_bytes"] else ""
        print(f"{name:28s} plain {got['plain_ms']:8.2f} ms  capture {got['capture_ms']:8.2f} ms  ratio {got['ratio']:.2f}x "
              f"(ratio of medians {got['ratio_of_medians']:.2f}x, {got['recorder']}{peak})", flush=True)
    ARGS[:] = [a, kw]
    dev.reset_memory_peak()
    with torch.no_grad():
        plain()
    dev.synchronize()
    res["plain_peak_device_bytes"] = dev.memory_peak()  # the forward alone: what each variant's peak is measured against
    if res["plain_peak_device_bytes"]:
        print(f"plain forward peak {res['plain_peak_device_bytes'] / 2**30:.2f} GiB (weights included)", flush=True)
    got = paired(plain, naive_stats(module), dev.synchronize, args.warmup, args.repeats)
    res["variants"]["naive_per_tensor_stats"] = got
    print(f"{'naive_per_tensor_stats':28s} plain {got['plain_ms']:8.2f} ms  capture {got['capture_ms']:8.2f} ms  ratio {got['ratio']:.2f}x", flush=True)
    cap = capture(mode="stats", op_sequence=False)()
    res["stats_entries"] = len(cap.entries)
    res["stats_blobs"] = len(cap.stats)
    res["peak_device_bytes"] = dev.memory_peak()

    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix="npuport-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        if args.overhead_only:
            raise _Skip
        t0 = time.perf_counter()
        path = record(target, args.device, RunOptions(scenario=f"prefill:batch=1,seq={args.seq}", capture=CaptureOptions(mode="stats", op_sequence=False)),
                      str(scratch / "stats_ref"), force=True)
        res["record_stats_s"] = time.perf_counter() - t0
        res["artifact_stats_bytes"] = sum(p.stat().st_size for p in path.iterdir())
        # full captures at a shorter sequence: the D2H copy of every activation is the point of this number
        short = RunOptions(scenario=f"prefill:batch=1,seq={args.compare_seq}")
        sp = prepare(target, short)
        si = device_inputs(sp.inputs, dev)
        full = CaptureOptions(mode="full", op_sequence=False)
        t0 = time.perf_counter()
        c1 = run_capture(module, si["args"], si["kwargs"], full, modes_for(dev), dev.synchronize)
        res["full_capture_s"] = time.perf_counter() - t0
        c2 = run_capture(module, si["args"], si["kwargs"], full, modes_for(dev), dev.synchronize)
        nbytes = sum(t.numel() * t.element_size() for t in c1.full.values())
        tols = load_tolerances()
        t0 = time.perf_counter()
        comp = compare(c1, c2, tols)
        secs = time.perf_counter() - t0
        res["compare_full"] = {"seq": args.compare_seq, "bytes_per_side": nbytes, "seconds": secs, "GB_per_s": 2 * nbytes / secs / 1e9,
                               "entries": len(comp.results), "passed": bool(comp)}
        st = capture(mode="stats", op_sequence=False)()
        t0 = time.perf_counter()
        comp = compare(cap, st, tols)
        secs = time.perf_counter() - t0
        res["compare_stats"] = {"entries": len(comp.results), "seconds": secs, "entries_per_s": len(comp.results) / secs}
        print(f"record --stats-only {res['record_stats_s']:.1f} s, artifact {res['artifact_stats_bytes'] / 2**20:.2f} MiB; "
              f"full capture at seq {args.compare_seq}: {nbytes / 2**30:.2f} GiB in {res['full_capture_s']:.2f} s; "
              f"compare full {res['compare_full']['GB_per_s']:.2f} GB/s, stats {res['compare_stats']['entries_per_s']:.0f} entries/s", flush=True)
    except _Skip:
        pass
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    target_ok = res["variants"]["stats_only"]["ratio"] <= 1.3
    res["target"] = {"stats_only_ratio_max": 1.3, "met": target_ok}
    print(f"stats-only overhead {res['variants']['stats_only']['ratio']:.2f}x (target <= 1.3x): {'met' if target_ok else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
