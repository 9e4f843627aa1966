#!/usr/bin/env python3
"""Where `--stats-only` capture time goes: hooks, the recorder's Python, the statistics kernels, the final copy.

Each variant runs the same forward (batch 1 x --seq tokens) with hooks attached once, timed as the median of
--repeats passes after --warmup (host clock around device synchronize). Also: the device's busy time per step
(torch.profiler, sum of kernel times), so a variant's extra wall time can be split into "the device had more to do"
and "the host was late", and a check that the Triton and torch statistics paths agree on the real activations.

Usage: python scripts/profile_parity_capture.py [--device cuda] [--config examples/configs/tinyllama-1.1b.json]
       [--dtype bfloat16] [--seq 2048] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import npuport.parity.stats as S  # noqa: E402
from npuport.devices.device import parse_device  # noqa: E402
from npuport.parity.capture import Capturer  # noqa: E402
from npuport.parity.entries import CaptureOptions  # noqa: E402
from npuport.parity.session import RunOptions, Target, device_inputs, modes_for, place, prepare  # noqa: E402


def timed(fn: Callable[[], Any], sync: Callable[[], None], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def device_busy_ms(fn: Callable[[], Any], sync: Callable[[], None], top: int = 0) -> tuple[float, list[str]]:
    """Sum of device kernel time for one call of fn (after a warm call), and the `top` costliest kernels."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    rows = [e for e in prof.key_averages() if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA")]
    total = sum(e.self_device_time_total for e in rows) / 1e3
    rows.sort(key=lambda e: -e.self_device_time_total)
    lines = [f"    {e.self_device_time_total / 1e3:8.3f} ms  x{e.count:<5d} {e.key[:90]}" for e in rows[:top]]
    return total, lines


def _timer(parts: dict[str, float]) -> Callable[[Any, str, str], Callable[[], None]]:
    """timed_fn(owner, name, label): wrap owner.name so its wall time adds up in parts[label]; returns the undo."""

    def timed_fn(owner: Any, name: str, label: str) -> Callable[[], None]:
        orig = getattr(owner, name)

        def wrapper(*args_: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*args_, **kwargs)
            finally:
                parts[label] = parts.get(label, 0.0) + time.perf_counter() - t0
        setattr(owner, name, wrapper)
        return lambda: setattr(owner, name, orig)

    return timed_fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", default=str(ROOT / "examples" / "configs" / "tinyllama-1.1b.json"))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json")
    ap.add_argument("--cprofile", help="write a cProfile of 10 captured steps (and 10 one-shot captures) here")
    ap.add_argument("--no-sweep", action="store_true", help="skip the statistics kernel's block-size sweep")
    args = ap.parse_args()

    dev = parse_device(args.device)
    dev.check_present()
    target = Target(hf_config=args.config, dtype=args.dtype)
    opts = RunOptions(scenario=f"prefill:batch=1,seq={args.seq}")
    prep = prepare(target, opts)
    dev.set_numerics_policy(opts.policy)
    module = place(prep, dev)
    inputs = device_inputs(prep.inputs, dev)
    a, kw = inputs["args"], inputs["kwargs"]
    sync = dev.synchronize
    res: dict[str, Any] = {"device": dev.versions(), "config": Path(args.config).name, "dtype": args.dtype, "seq": args.seq,
                           "fused_available": S.fused_available(), "variants": {}}

    def plain() -> None:
        with torch.no_grad():
            module(*a, **kw)

    def report(name: str, ms: float, base: float, busy: float | None = None) -> None:
        res["variants"][name] = {"ms": ms, "ratio": ms / base, "device_busy_ms": busy}
        extra = f"  device busy {busy:7.2f} ms" if busy is not None else ""
        print(f"{name:34s} {ms:8.2f} ms  {ms / base:5.2f}x{extra}", flush=True)

    base = timed(plain, sync, args.warmup, args.repeats)
    busy, top = device_busy_ms(plain, sync, 5)
    report("plain", base, base, busy)
    print("\n".join(top))

    def noop_pre(mod: Any, args_: Any, kwargs: Any) -> None:
        return None

    def noop_post(mod: Any, args_: Any, kwargs: Any, out: Any) -> None:
        return None

    handles = []
    for m in module.modules():
        handles.append(m.register_forward_pre_hook(noop_pre, with_kwargs=True))
        handles.append(m.register_forward_hook(noop_post, with_kwargs=True, always_call=True))
    report("noop pre+post hooks", timed(plain, sync, args.warmup, args.repeats), base)
    for h in handles:
        h.remove()

    kernels = ["torch"] + (["triton"] if S.fused_available() else [])
    for kernel in kernels:
        with Capturer(module, CaptureOptions(mode="stats", op_sequence=False, stats_kernel=kernel), modes_for(dev), sync) as cap:
            step = lambda: cap.step(a, kw)  # noqa: E731
            ms = timed(step, sync, args.warmup, args.repeats)
            busy, top = device_busy_ms(step, sync, 6)
            report(f"stats-only ({kernel} statistics)", ms, base, busy)
            print("\n".join(top))
    with Capturer(module, CaptureOptions(mode="stats", op_sequence=False), modes_for(dev), sync) as cap:
        add, finish = S.StatsBatcher.add, S.StatsBatcher.finish
        try:
            S.StatsBatcher.finish = lambda self: S.StatsTable.empty()  # type: ignore[method-assign]
            S.StatsBatcher.add = lambda self, *args_: False  # type: ignore[method-assign]
            report("stats-only, no statistics (Python only)", timed(lambda: cap.step(a, kw), sync, args.warmup, args.repeats), base)
        finally:
            S.StatsBatcher.add, S.StatsBatcher.finish = add, finish  # type: ignore[method-assign]
    base2 = timed(plain, sync, args.warmup, args.repeats)
    report("plain (again)", base2, base)

    if S.fused_available():  # the two statistics paths on the same activations
        caps = {}
        for kernel in ("torch", "triton"):
            with Capturer(module, CaptureOptions(mode="stats", op_sequence=False, stats_kernel=kernel), modes_for(dev), sync) as cap:
                caps[kernel] = cap.step(a, kw)
        t, f = caps["torch"].stats, caps["triton"].stats
        worst = {"min": 0.0, "max": 0.0, "sum": 0.0, "norm": 0.0}
        checks = samples = 0
        for b, st in t.items():
            sf = f[b]
            checks += st.checksum == sf.checksum
            samples += all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(st.sample, sf.sample))
            for k in worst:
                x, y = getattr(st, k), getattr(sf, k)
                if math.isfinite(x) and math.isfinite(y):
                    worst[k] = max(worst[k], abs(x - y) / max(abs(x), abs(y), 1e-30) if k in ("sum", "norm") else abs(x - y))
        res["agreement"] = {"blobs": len(t), "checksums_equal": checks, "samples_equal": samples, "worst": worst}
        print(f"triton vs torch statistics: {len(t)} tensors, checksums equal {checks}, samples equal {samples}, "
              f"worst |min diff| {worst['min']:.3g}, |max diff| {worst['max']:.3g}, rel sum {worst['sum']:.3g}, rel norm {worst['norm']:.3g}")
    if S.fused_available() and not args.no_sweep:
        res["kernel_sweep"] = kernel_sweep(module, a, kw, sync)
    res["ladder"] = ladder(module, a, kw, sync, plain, args.repeats)
    res["warnings_per_step"] = warnings_per_step(module, a, kw, sync)
    print(f"warnings raised per captured step: {res['warnings_per_step']}")
    res["host_breakdown"] = host_breakdown(module, a, kw, sync, args.repeats)
    res["one_shot_breakdown"] = one_shot_breakdown(module, a, kw, sync, args.repeats)
    if args.cprofile:
        host_profile(module, a, kw, sync, args.cprofile)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


def kernel_sweep(module: torch.nn.Module, a: Any, kw: Any, sync: Callable[[], None]) -> list[dict[str, Any]]:
    """The statistics kernel over one forward's module outputs, for a few loop block sizes and warp counts."""
    from npuport.parity import stats_triton as ST

    outs: dict[int, torch.Tensor] = {}

    def grab(mod: Any, args_: Any, out: Any) -> None:
        if isinstance(out, torch.Tensor) and out.dtype in S._FUSED_DTYPES and out.is_contiguous():
            outs[id(out)] = out
    hs = [m.register_forward_hook(grab) for m in module.modules()]
    with torch.no_grad():
        module(*a, **kw)
    for h in hs:
        h.remove()
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in outs.values():
        by_dtype.setdefault(t.dtype, []).append(t)
    nbytes = sum(t.nbytes for t in outs.values())
    rows = []
    saved = ST.BLOCK, ST.NUM_WARPS
    try:
        for block, warps in ((2048, 8), (4096, 8), (4096, 16), (8192, 16), (1024, 4)):
            ST.BLOCK, ST.NUM_WARPS = block, warps
            def run() -> None:
                for ts in by_dtype.values():
                    ST.packed_rows([t.data_ptr() for t in ts], [t.numel() for t in ts], ts[0].dtype, ts[0].device)
            for _ in range(3):
                run()
            sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(10):
                start.record()
                run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            ms = statistics.median(times)
            rows.append({"block": block, "warps": warps, "ms": ms, "GB_per_s": nbytes / ms / 1e6})
            print(f"statistics kernel BLOCK {block:5d} warps {warps:2d}: {ms:6.3f} ms for {nbytes / 1e9:.2f} GB ({nbytes / ms / 1e6:7.1f} GB/s)", flush=True)
    finally:
        ST.BLOCK, ST.NUM_WARPS = saved
    return rows


def warnings_per_step(module: torch.nn.Module, a: Any, kw: Any, sync: Callable[[], None]) -> int:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            module(*a, **kw)
        sync()
    for w in caught[:3]:
        print("   warning:", str(w.message)[:160])
    return len(caught)


def host_breakdown(module: torch.nn.Module, a: Any, kw: Any, sync: Callable[[], None], repeats: int) -> dict[str, float]:
    """Median host milliseconds per captured step inside each part of the lean stats path, from perf_counter wrappers
    (which add a little time of their own, so the parts are shares, not exact costs): the recording calls, the
    statistics flushes (and within them the table + launches of the Triton path), building the entries, and the
    final copy, which waits for the device."""
    import npuport.parity.recorders as C

    parts: dict[str, float] = {}
    timed_fn = _timer(parts)

    undo = [timed_fn(C.LeanStatsRecorder, "record", "record (incl. flushes)"), timed_fn(S.StatsBatcher, "flush", "flush"),
            timed_fn(S, "packed_rows", "flush: triton table + launches"), timed_fn(S.StatsBatcher, "_flush_torch", "flush: torch path"),
            timed_fn(C.LeanStatsRecorder, "entries", "entries (layout changed)"), timed_fn(S.StatsBatcher, "finish", "final copy (waits for device)"),
            timed_fn(C.LeanStatsRecorder, "finish", "finish (all)")]
    per_step: dict[str, list[float]] = {}
    steps: list[float] = []
    try:
        with Capturer(module, CaptureOptions(mode="stats", op_sequence=False), modes_for(parse_device("cuda")), sync) as cap:
            for i in range(3 + repeats):
                parts.clear()
                sync()
                t0 = time.perf_counter()
                cap.step(a, kw)
                steps.append(time.perf_counter() - t0)
                if i >= 3:
                    for k, v in parts.items():
                        per_step.setdefault(k, []).append(v)
    finally:
        for u in undo:
            u()
    out = {"step": statistics.median(steps[3:]) * 1e3}
    out.update({k: statistics.median(v) * 1e3 for k, v in per_step.items()})
    print("host time per captured step (median ms; wrappers add a little):")
    for k, v in out.items():
        print(f"    {k:34s} {v:7.3f}")
    return out


class _Hold:
    """Diagnostic stand-in for the lean recorder: keeps every module call's arguments and output alive to the end of
    the step and records nothing (what holding activations for the statistics costs the allocator)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def record(self, path: str, args: tuple, kwargs: dict, output: Any) -> None:
        self.calls.append((args, kwargs, output))


class _Ignore:
    def record(self, path: str, args: tuple, kwargs: dict, output: Any) -> None:
        return None


def ladder(module: torch.nn.Module, a: Any, kw: Any, sync: Callable[[], None], plain: Callable[[], None],
           repeats: int) -> dict[str, float]:
    """The steady step built up in parts, each the median ratio of pairs (plain forward of the bare model, then the
    part): the wrappers calling a recorder that does nothing, one that only holds the tensors, the lean recorder with
    the statistics queue switched off, and the whole step."""
    opts = CaptureOptions(mode="stats", op_sequence=False)
    dev = parse_device("cuda")

    def with_stand_in(cap: Capturer, make: Callable[[], Any]) -> Callable[[], None]:
        def step() -> None:
            cap._lean_rec = make()
            try:
                with torch.no_grad():
                    module(*a, **kw)
            finally:
                cap._lean_rec = None
        return step

    cap = Capturer(module, opts, modes_for(dev), sync)
    add, flush, finish = S.StatsBatcher.add, S.StatsBatcher.flush, S.StatsBatcher.finish

    def queue_off() -> None:
        S.StatsBatcher.add = lambda self, *args_: False  # type: ignore[method-assign]
        S.StatsBatcher.flush = lambda self: None  # type: ignore[method-assign]
        S.StatsBatcher.finish = lambda self: S.StatsTable.empty()  # type: ignore[method-assign]

    def queue_on() -> None:
        S.StatsBatcher.add, S.StatsBatcher.flush, S.StatsBatcher.finish = add, flush, finish  # type: ignore[method-assign]

    parts: list[tuple[str, Callable[[], Any], Callable[[], None], Callable[[], None]]] = [
        ("wrappers, recorder does nothing", with_stand_in(cap, _Ignore), lambda: None, lambda: None),
        ("wrappers, tensors held to step end", with_stand_in(cap, _Hold), lambda: None, lambda: None),
        ("lean recorder, statistics off", lambda: cap.step(a, kw), queue_off, queue_on),
        ("lean recorder + statistics (steady)", lambda: cap.step(a, kw), lambda: None, lambda: None),
    ]
    ratios: dict[str, list[float]] = {name: [] for name, *_ in parts}
    print("steady step in parts (median ratio of plain/part pairs):")
    for i in range(2 + repeats):
        for name, fn, on, off in parts:
            sync()
            t0 = time.perf_counter()
            plain()
            sync()
            t1 = time.perf_counter()
            cap.__enter__()
            on()
            try:
                sync()
                t2 = time.perf_counter()
                fn()
                sync()
                t3 = time.perf_counter()
            finally:
                off()
                cap.__exit__(None, None, None)
            if i >= 2:
                ratios[name].append((t3 - t2) / (t1 - t0))
    out = {name: statistics.median(r) for name, r in ratios.items()}
    for name, r in out.items():
        print(f"    {name:40s} {r:5.3f}x")
    return out


def one_shot_breakdown(module: torch.nn.Module, a: Any, kw: Any, sync: Callable[[], None], repeats: int) -> dict[str, float]:
    """Median host milliseconds per one-shot capture (`run_capture`: attach, one step, detach) in its parts."""
    import npuport.parity.capture as CP
    import npuport.parity.recorders as C

    parts: dict[str, float] = {}
    timed_fn = _timer(parts)

    undo = [timed_fn(CP.Capturer, "__init__", "Capturer() (module names)"), timed_fn(CP.Capturer, "__enter__", "attach"),
            timed_fn(CP.Capturer, "__exit__", "detach"), timed_fn(S, "auto_budget", "automatic budget"),
            timed_fn(C.LeanStatsRecorder, "entries", "entries"), timed_fn(C.LeanStatsRecorder, "finish", "finish (all)"),
            timed_fn(S.StatsBatcher, "flush", "flush")]
    per: dict[str, list[float]] = {}
    totals: list[float] = []
    dev = parse_device("cuda")
    opts = CaptureOptions(mode="stats", op_sequence=False)
    try:
        for i in range(2 + repeats):
            parts.clear()
            sync()
            t0 = time.perf_counter()
            CP.run_capture(module, a, kw, opts, modes_for(dev), sync)
            totals.append(time.perf_counter() - t0)
            if i >= 2:
                for k, v in parts.items():
                    per.setdefault(k, []).append(v)
    finally:
        for u in undo:
            u()
    out = {"one-shot": statistics.median(totals[2:]) * 1e3}
    out.update({k: statistics.median(v) * 1e3 for k, v in per.items()})
    print("host time per one-shot capture (median ms; wrappers add a little):")
    for k, v in out.items():
        print(f"    {k:34s} {v:7.3f}")
    return out


def host_profile(module: torch.nn.Module, a: Any, kw: Any, sync: Callable[[], None], path: str) -> None:
    """cProfile of 10 captured steps (hooks attached once): where the host's time goes."""
    import cProfile
    import io
    import pstats

    with Capturer(module, CaptureOptions(mode="stats", op_sequence=False), modes_for(parse_device("cuda")), sync) as cap:
        for _ in range(3):
            cap.step(a, kw)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            cap.step(a, kw)
        prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(40)
    from npuport.parity.capture import run_capture

    opts = CaptureOptions(mode="stats", op_sequence=False)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(10):
        run_capture(module, a, kw, opts, modes_for(parse_device("cuda")), sync)
    prof.disable()
    buf.write("\n\n10 one-shot captures (run_capture):\n")
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(40)
    Path(path).write_text(buf.getvalue())


if __name__ == "__main__":
    main()
