#!/usr/bin/env python3
"""Audit DeepSeek-V3's own inference code (deepseek-ai/DeepSeek-V3, inference/model.py) with its 671B config, bf16, on
fake tensors: code nobody here wrote, with the routing loop it runs on the host (bincount(...).tolist(), then
torch.where(indices == i) per expert) and a forward under torch.inference_mode.

Nothing of that repository is in this one: give the path of a checkout. Its model.py and config are copied into a
temporary folder beside two files written here: a stand-in for its `kernel.py` (triton fp8 kernels, which the bf16
model never calls; triton is not a dependency of npuport) and a model file in npuport's convention (build_model,
example_inputs: prefill only, the code is inference-only and its decode takes a start position).

Usage: python scripts/audit_deepseek_reference.py CHECKOUT [--seq 4096] [--config config_671B.json]
Prints the scenario's calls and FLOPs, the notes and the ten ops with the largest time share on the default chip.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL = '''# stand-in for DeepSeek-V3's triton kernels (fp8 only): the bf16 model never calls them
def _fp8_only(*args, **kwargs):
    raise RuntimeError("fp8 kernels are not available in this audit (bf16 model)")


act_quant = weight_dequant = fp8_gemm = _fp8_only
'''

WRAPPER = '''import json
from pathlib import Path

import torch

import model as ds

CFG = json.loads((Path(__file__).resolve().parent / "config.json").read_text())


def build_model():
    return ds.Transformer(ds.ModelArgs(**dict(CFG, dtype="bf16"), max_batch_size=1, max_seq_len={seq}))


def example_inputs(scenario):
    if scenario.kind != "prefill":
        return None
    return (torch.randint(0, CFG["vocab_size"], (scenario.batch, scenario.seq)),)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--config", default="config_671B.json")
    a = ap.parse_args()
    src = a.checkout / "inference"
    if not (src / "model.py").is_file() or not (src / "configs" / a.config).is_file():
        sys.exit(f"audit_deepseek_reference: {src} has no model.py or configs/{a.config} (expected a DeepSeek-V3 checkout)")
    rev = subprocess.run(["git", "-C", str(a.checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        shutil.copy(src / "model.py", work / "model.py")
        shutil.copy(src / "configs" / a.config, work / "config.json")
        (work / "kernel.py").write_text(KERNEL, encoding="utf-8")
        (work / "npuport_model.py").write_text(WRAPPER.replace("{seq}", str(a.seq)), encoding="utf-8")
        out = work / "audit.json"
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", "from npuport.cli.main import main; main()", "audit", str(work / "npuport_model.py"), "--dtype", "bfloat16",
                            "--scenario", f"prefill:batch=1,seq={a.seq}", "--format", "json", "-o", str(out)],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            sys.exit(f"audit_deepseek_reference: the audit exited {r.returncode}:\n{r.stderr[-2000:]}")
        data = json.loads(out.read_text())
    sc = data["scenarios"][0]
    print(f"DeepSeek-V3 inference/model.py at {rev}, {a.config}, bf16, prefill 1 x {a.seq}: {sc['calls']:,} calls, "
          f"{sc['flops']:.3g} FLOPs, audit {wall:.0f} s (whole command), exit {r.returncode}")
    for n in data["notes"]:
        print(f"  note: {n}")
    print("| op | time share | calls | class |")
    print("|---|---:|---:|---|")
    for o in sorted(data["ops"], key=lambda o: -o["time_share"])[:10]:
        print(f"| {o['op']} | {o['time_share']:.3f} | {o['calls']:,} | {o['class']} |")


if __name__ == "__main__":
    main()
