#!/usr/bin/env python3
"""Building a model on fake tensors, with parameters made directly (npuport.trace.fast_build) and the usual way (every
`torch.empty` and `nn.Parameter` through the fake dispatcher), each in a fresh process, the two ways alternating;
prints medians and the ratio.

Targets: HF configs of examples/configs (--models) and model files (--files, built as `npuport audit FILE` builds them,
in --dtype). For model files also the floor: build_model() on the meta device with no fake tensors at all.
Usage: python scripts/bench_fake_build.py [--repeats 3] [--models llama-2-7b,llama-2-70b,deepseek-v3]
       [--files path/to/model.py,...] [--dtype bfloat16]
(DeepSeek-V3's own inference code as a model file: the folder scripts/audit_deepseek_reference.py prepares, or
 --deepseek CHECKOUT to prepare it here.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

CHILD = r"""
import json, sys, time
import torch
import npuport.trace.fast_build as fast_build
from npuport.model.loading import load_target
if sys.argv[1] == "usual":
    fast_build._agrees = False  # the self-check's "disagrees": built the usual way
kind, target, dtype = sys.argv[2], sys.argv[3], sys.argv[4]
load_target(hf_config=sys.argv[5])  # imports and the self-check, outside the timing
if sys.argv[1] == "meta":  # the floor: the model file's build_model() on the meta device, no fake tensors at all
    import importlib.util, pathlib
    sys.path.insert(0, str(pathlib.Path(target).parent))
    spec = importlib.util.spec_from_file_location("bench_target", target)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.set_default_dtype(getattr(torch, dtype))
    t = time.perf_counter()
    with torch.device("meta"):
        module = mod.build_model()
    wall = time.perf_counter() - t
    print(json.dumps({"s": wall, "params": sum(1 for _ in module.parameters()), "fast": None}))
    sys.exit(0)
t = time.perf_counter()
m = load_target(hf_config=target) if kind == "hf" else load_target(model=target, dtype=dtype)
wall = time.perf_counter() - t
print(json.dumps({"s": wall, "params": sum(1 for _ in m.module.parameters()), "fast": fast_build._agrees}))
"""


def run_once(way: str, kind: str, target: str, dtype: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    warm = str(ROOT / "examples" / "configs" / "tinyllama-1.1b.json")
    out = subprocess.run([sys.executable, "-c", CHILD, way, kind, target, dtype, warm], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"bench_fake_build: building {target} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="llama-2-7b,llama-2-70b,deepseek-v3")
    ap.add_argument("--files", default="")
    ap.add_argument("--deepseek", type=Path, help="a deepseek-ai/DeepSeek-V3 checkout: its inference model.py as a model file")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    targets = [(name, "hf", str(ROOT / "examples" / "configs" / f"{name}.json")) for name in a.models.split(",") if name]
    targets += [(Path(f).name, "file", f) for f in a.files.split(",") if f]
    tmp = None
    if a.deepseek:
        import audit_deepseek_reference as ds  # noqa: PLC0415 - a sibling script, only with --deepseek

        tmp = Path(tempfile.mkdtemp())
        src = a.deepseek / "inference"
        shutil.copy(src / "model.py", tmp / "model.py")
        shutil.copy(src / "configs" / "config_671B.json", tmp / "config.json")
        (tmp / "kernel.py").write_text(ds.KERNEL, encoding="utf-8")
        (tmp / "npuport_model.py").write_text(ds.WRAPPER.replace("{seq}", "4096"), encoding="utf-8")
        targets.append(("DeepSeek-V3 inference/model.py (671B)", "file", str(tmp / "npuport_model.py")))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| target | parameters | fast (median) | usual (median) | usual / fast | meta floor (median) | fast runs | usual runs |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    try:
        for name, kind, target in targets:
            runs: dict[str, list[float]] = {"fast": [], "usual": [], "meta": []}
            params = 0
            for _ in range(a.repeats):
                for way in ("fast", "usual") + (("meta",) if kind == "file" else ()):
                    r = run_once(way, kind, target, a.dtype)
                    if way == "fast" and not r["fast"]:
                        sys.exit("bench_fake_build: the fast way was not used (its self-check disagreed on this torch)")
                    runs[way].append(r["s"])
                    params = r["params"] if way != "meta" else params
            f, u = statistics.median(runs["fast"]), statistics.median(runs["usual"])
            floor = f"{statistics.median(runs['meta']):.3f} s" if runs["meta"] else "-"
            print(f"| {name} | {params:,} | {f:.3f} s | {u:.3f} s | {u / f:.2f}x | {floor} | {[round(x, 3) for x in runs['fast']]} | "
                  f"{[round(x, 3) for x in runs['usual']]} |")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
