#!/usr/bin/env python3
"""Run a model for real under torch.profiler (record_shapes) and write its Chrome / Kineto trace, the input of
`npuport profile import`. A first, small piece of issue 22's `npuport profile record` (see docs/profile.md):
one scenario, CPU (or CUDA when --dev cuda and a GPU is there), no module or source mapping.

Usage: python scripts/profile_record.py MODEL.py --scenario prefill:batch=1,seq=64 -o trace.json[.gz]
                                        [--dev cpu|cuda] [--warmup 1] [--steps 1]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.model.loading import load_target  # noqa: E402
from npuport.model.scenarios import parse_scenario  # noqa: E402


def _to(value: object, dev: str) -> object:
    return value.to(dev) if isinstance(value, torch.Tensor) else value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--scenario", default="prefill:batch=1,seq=64")
    ap.add_argument("-o", "--output", required=True, help="trace.json or trace.json.gz")
    ap.add_argument("--dev", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args()

    sc = parse_scenario(args.scenario)
    target = load_target(args.model, fake=False)
    made = target.make_inputs(sc)
    if made is None:
        sys.exit(f"error: {args.model} has no inputs for scenario {sc.name}")
    pos, kw = made
    pos = tuple(_to(a, args.dev) for a in pos)
    kw = {k: _to(v, args.dev) for k, v in kw.items()}
    module = target.module.to(args.dev).eval()
    out = Path(args.output)
    tmp = tempfile.TemporaryDirectory()
    raw = Path(tmp.name) / "trace.json"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.dev == "cuda" else [])
    with torch.no_grad(), profile(activities=activities, record_shapes=True,
                                  schedule=schedule(wait=0, warmup=args.warmup, active=args.steps),
                                  on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for _ in range(args.warmup + args.steps):
            module(*pos, **kw)
            if args.dev == "cuda":
                torch.cuda.synchronize()
            prof.step()
    with tmp:
        if out.name.endswith(".gz"):
            with raw.open("rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(raw, out)
    print(f"wrote {out} ({out.stat().st_size} bytes): {sc.spec()}, {args.steps} step(s) on {args.dev}", file=sys.stderr)


if __name__ == "__main__":
    main()
