#!/usr/bin/env python3
"""npuport's stats-only capture against msprobe's statistics dump, side by side in one process (issue 25).

Targets: `parity record --stats-only` at most 1.2x a plain forward one-shot (a fresh capture session of one step, as
`record` runs it) and at most 1.1x in steady state (a loop capturing every step); TinyLlama-1.1B shape, bf16,
batch 1 x 2048, forward only. msprobe (PyPI `mindstudio-probe`, the Ascend tool) is configured as its PyTorch dump
docs say: `PrecisionDebugger(config_path=...)` with task "statistics", summary_mode "statistics", then
`start(model)`, forward, `stop()`, `step()`; level L0 (every module) and L1 (every torch API), its dump files going to
a temporary folder.

Variants, each timed right after a plain forward of the bare model (host clock around device synchronize; the
garbage collector run before each pair, untimed, so one variant's garbage is not collected inside another's timing):
- npuport_one_shot: `run_capture` (wrappers attached, one step, detached; what `parity record` does)
- npuport_steady: one `Capturer`'s step, its wrappers attached before the timer starts (capturing every step)
- msprobe_<level>_one_shot: its hooks installed inside the timing (L1: the torch APIs wrapped; L0: the module hooks,
  taken off again after the step), then start/forward/stop/step
- msprobe_<level>_steady: start/forward/stop/step with the hooks in place
msprobe keeps one debugger per process (a singleton) and never takes L0's module hooks off a model, so each level
gets its own debugger (switched by setting the singleton) and L0 its own copies of the model; L1's API wrappers are
put back to the originals between its steps, so the plain forwards run bare. Every round visits every variant
(interleaved), after --warmup rounds; reported: median of the per-pair ratios over --repeats rounds.

Usage: python scripts/bench_capture_msprobe.py [--device cuda] [--config examples/configs/tinyllama-1.1b.json]
       [--seq 2048] [--repeats 15] [--warmup 3] [--levels L0,L1] [--budgets 1024,512] [--json OUT.json]
Results on the H200 (2026-12-04): docs/parity.md, "Capture overhead on the GPU against msprobe".
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from npuport.devices.device import parse_device  # noqa: E402
from npuport.parity.capture import Capturer, run_capture  # noqa: E402
from npuport.parity.entries import CaptureOptions  # noqa: E402
from npuport.parity.session import RunOptions, Target, device_inputs, modes_for, place, prepare  # noqa: E402

TARGETS = {"npuport_one_shot": 1.2, "npuport_steady": 1.1}
STATS_ONLY = CaptureOptions(mode="stats", op_sequence=False)  # what `parity record --stats-only` captures with


def _nothing() -> None:
    return None


@dataclass
class Variant:
    name: str
    run: Callable[[], Any]  # timed
    before: Callable[[], None] = _nothing  # untimed, between the plain forward and the timed run
    after: Callable[[], None] = _nothing  # untimed, after the timed run
    plain_s: list[float] = field(default_factory=list)
    run_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ratios = [r / p for p, r in zip(self.plain_s, self.run_s)]
        out = {"plain_ms": statistics.median(self.plain_s) * 1e3, "capture_ms": statistics.median(self.run_s) * 1e3,
               "ratio": statistics.median(ratios), "ratio_of_medians": statistics.median(self.run_s) / statistics.median(self.plain_s),
               "ratio_min": min(ratios), "ratio_max": max(ratios),
               "plain_all_ms": [round(t * 1e3, 2) for t in self.plain_s], "capture_all_ms": [round(t * 1e3, 2) for t in self.run_s]}
        if self.name in TARGETS:
            out["target"] = TARGETS[self.name]
            out["met"] = out["ratio"] <= TARGETS[self.name]
        return out


def rounds(variants: list[Variant], plain: Callable[[], Any], sync: Callable[[], None], warmup: int, repeats: int) -> None:
    """Every round visits every variant: plain forward, then the variant, each between device synchronizations."""
    for r in range(warmup + repeats):
        for v in variants:
            gc.collect()
            sync()
            t0 = time.perf_counter()
            plain()
            sync()
            t1 = time.perf_counter()
            v.before()
            sync()
            t2 = time.perf_counter()
            v.run()
            sync()
            t3 = time.perf_counter()
            v.after()
            if r >= warmup:
                v.plain_s.append(t1 - t0)
                v.run_s.append(t3 - t2)


def npuport_variants(module: torch.nn.Module, a: tuple, kw: dict, dev: Any, budgets_mib: list[int]) -> list[Variant]:
    one_shot = Variant("npuport_one_shot", lambda: run_capture(module, a, kw, STATS_ONLY, modes_for(dev), dev.synchronize))
    out = [one_shot]
    for mib in [0] + budgets_mib:  # 0: the automatic budget; others: diagnostics (more flushes, less memory held)
        opts = replace(STATS_ONLY, budget_bytes=mib << 20) if mib else STATS_ONLY
        cap = Capturer(module, opts, modes_for(dev), dev.synchronize)  # its layout and budget persist across attaches
        out.append(Variant("npuport_steady" + (f"_budget_{mib}m" if mib else ""), lambda cap=cap: cap.step(a, kw),
                           before=cap.__enter__, after=lambda cap=cap: cap.__exit__(None, None, None)))
    return out


def msprobe_variants(module: torch.nn.Module, a: tuple, kw: dict, levels: list[str], dump_root: Path) -> tuple[list[Variant], dict[str, Any]]:
    from msprobe.pytorch import PrecisionDebugger

    try:
        from importlib.metadata import version
        info: dict[str, Any] = {"version": version("mindstudio-probe")}
    except Exception:
        info = {"version": None}
    out: list[Variant] = []
    for level in levels:
        folder = dump_root / level
        folder.mkdir(parents=True)
        config = {"task": "statistics", "dump_path": str(folder), "rank": [], "step": [], "level": level, "async_dump": False,
                  "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
        config_path = dump_root / f"config_{level}.json"
        config_path.write_text(json.dumps(config))
        info[f"config_{level}"] = config
        PrecisionDebugger._instance = None  # one debugger per level (msprobe allows one per process)
        dbg = PrecisionDebugger(config_path=str(config_path))

        def use(d: Any = dbg) -> None:
            PrecisionDebugger._instance = d  # start/stop/step are class methods acting on the singleton

        def dump_step(model: torch.nn.Module) -> None:
            PrecisionDebugger.start(model)
            with torch.no_grad():
                model(*a, **kw)
            PrecisionDebugger.stop()
            PrecisionDebugger.step()

        if level == "L1":
            apis = dbg.service.api_register
            apis.restore_all_api()  # torch's own functions between msprobe's steps: the plain forwards run bare

            def l1_one_shot(use: Callable[[], None] = use, apis: Any = apis) -> None:
                use()
                apis.register_all_api()
                dump_step(module)
                apis.restore_all_api()

            def l1_attach(use: Callable[[], None] = use, apis: Any = apis) -> None:
                use()
                apis.register_all_api()
            out.append(Variant("msprobe_L1_one_shot", l1_one_shot))
            out.append(Variant("msprobe_L1_steady", lambda: dump_step(module), before=l1_attach, after=apis.restore_all_api))
        else:  # module hooks stay on the model msprobe was given: copies keep the measured plain forward bare
            fresh, hooked = copy.deepcopy(module), copy.deepcopy(module)

            def l0_one_shot(use: Callable[[], None] = use, model: torch.nn.Module = fresh) -> None:
                use()
                dump_step(model)  # start() puts its hooks on a model it has not hooked yet

            def l0_detach(d: Any = dbg, model: torch.nn.Module = fresh) -> None:
                _strip_msprobe_hooks(model)
                d.service.hooked_modules.remove(model)
            out.append(Variant("msprobe_L0_one_shot", l0_one_shot, after=l0_detach))
            out.append(Variant("msprobe_L0_steady", lambda model=hooked: dump_step(model), before=use))
    return out, info


def _strip_msprobe_hooks(model: torch.nn.Module) -> None:
    """Take msprobe's L0 hooks and forward wrapper off every submodule (msprobe itself has no call for it)."""
    for m in model.modules():
        for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
                     "_forward_hooks_always_called"):
            getattr(m, name).clear()
        for name in ("forward", "msprobe_hook", "msprobe_forward_hook"):
            m.__dict__.pop(name, None)


def dump_bytes(folder: Path) -> int:
    """Bytes of the last step msprobe wrote under `folder` (its stepN folders)."""
    steps = sorted(folder.glob("step*"), key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else -1)
    return sum(f.stat().st_size for f in steps[-1].rglob("*") if f.is_file()) if steps else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", default=str(ROOT / "examples" / "configs" / "tinyllama-1.1b.json"))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=3, help="rounds before timing")
    ap.add_argument("--repeats", type=int, default=15, help="timed rounds (plain/capture pairs per variant)")
    ap.add_argument("--levels", default="L0,L1", help="msprobe levels, comma-separated; empty: npuport only")
    ap.add_argument("--budgets", default="", help="diagnostic: also npuport steady with these statistics budgets (MiB, comma-separated)")
    ap.add_argument("--json", help="write the results here")
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

    def plain() -> None:
        with torch.no_grad():
            module(*a, **kw)

    import transformers
    res: dict[str, Any] = {"device": dev.versions(), "transformers": transformers.__version__, "config": Path(args.config).name,
                           "dtype": args.dtype, "seq": args.seq, "repeats": args.repeats, "warmup": args.warmup,
                           "command": " ".join([Path(sys.executable).name] + sys.argv), "variants": {}}
    variants = npuport_variants(module, a, kw, dev, [int(x) for x in args.budgets.split(",") if x])
    levels = [x for x in args.levels.split(",") if x]
    dump_root = Path(tempfile.mkdtemp(prefix="msprobe-dump-"))
    try:
        if levels:
            more, res["msprobe"] = msprobe_variants(module, a, kw, levels, dump_root)
            variants += more
        rounds(variants, plain, dev.synchronize, args.warmup, args.repeats)
        for level in levels:
            res["msprobe"][f"dump_bytes_per_step_{level}"] = dump_bytes(dump_root / level)
    finally:
        shutil.rmtree(dump_root, ignore_errors=True)
    cap = run_capture(module, a, kw, STATS_ONLY, modes_for(dev), dev.synchronize)
    res["npuport_entries"], res["npuport_blobs"] = len(cap.entries), len(cap.stats)
    print(f"\n{args.config} {args.dtype} 1 x {args.seq}, {args.repeats} rounds after {args.warmup}; "
          f"torch {torch.__version__}, transformers {transformers.__version__}, msprobe {res.get('msprobe', {}).get('version')}")
    print(f"{'variant':28s} {'plain ms':>9s} {'capture ms':>11s} {'ratio':>7s} {'min..max':>12s} {'ratio of medians':>17s}")
    for v in variants:
        s = res["variants"][v.name] = v.summary()
        goal = f"  target <= {s['target']}x: {'met' if s['met'] else 'NOT met'}" if "target" in s else ""
        print(f"{v.name:28s} {s['plain_ms']:9.2f} {s['capture_ms']:11.2f} {s['ratio']:6.2f}x {s['ratio_min']:5.2f}..{s['ratio_max']:.2f}x "
              f"{s['ratio_of_medians']:16.2f}x{goal}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
