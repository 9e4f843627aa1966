#!/usr/bin/env python3
"""Hold npuport's memory estimate against what a real CUDA step allocated (scripts/memory_gpu.py on the lent H200,
results in docs/measured/memory-h200-*.json) and print the markdown table of docs/memory.md.

The estimate is the audit of the same config, scenarios and dtype on fake tensors (this machine, CPU only). The
allocator also holds cuBLAS workspaces, which no op of the model allocates: 32 MiB per handle on sm90, one handle
per thread that runs matmuls (forward and autograd's backward thread), so 64 MiB once a training step has run
(aten/src/ATen/cuda/CublasHandlePool.cpp; ../shared/facts/memory.md item 5). They are added as their own column.
Usage: python scripts/memory_check.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.api import audit_model  # noqa: E402

WORKSPACE = 2 * 32 * 2**20  # two cuBLAS handles of 32 MiB on sm90
RUNS = (("TinyLlama-1.1B", "tinyllama-1.1b.json", "memory-h200-tinyllama.json", (4, 2048), 1024),
        ("Llama-2-7B", "llama-2-7b.json", "memory-h200-llama-2-7b.json", (1, 4096), 2048))


def main() -> None:
    print("| model | row | npuport estimate | + cuBLAS workspaces | measured (H200) | difference |")
    print("|---|---|---:|---:|---:|---:|")
    worst = 0.0
    for label, cfg, measured, (b, s), p in RUNS:
        real = json.loads((ROOT / "docs" / "measured" / measured).read_text())
        _, d = audit_model(hf_config=str(ROOT / "examples" / "configs" / cfg), chip="H200", dtype="bfloat16",
                           scenarios=[f"train:batch={b},seq={s}", f"prefill:batch=1,seq={p}", f"decode:batch=1,past={p}"])
        m = {sc["name"]: sc["memory"] for sc in d["scenarios"]}
        t = m["train"]
        rows = [("weights", t["weights_bytes"], 0, real["weights"]),
                (f"train {b}x{s}, step 0 peak", t["step0_peak_bytes"], WORKSPACE, real["train_step0_peak"]),
                (f"train {b}x{s}, step 1 peak", t["peak_bytes"], WORKSPACE, real["train_step1_peak"]),
                ("held after the step", t["held_bytes"], WORKSPACE, real["train_held"]),
                (f"prefill 1x{p} peak", m["prefill"]["peak_bytes"], WORKSPACE, real["prefill_peak"]),
                (f"KV cache of {p} tokens", m["decode"]["inputs_bytes"], 0, real["kv_cache"]),
                ("decode peak", m["decode"]["peak_bytes"], WORKSPACE, real["decode_peak"])]
        for name, est, ws, got in rows:
            diff = (est + ws - got) / got
            worst = max(worst, abs(diff))
            print(f"| {label} | {name} | {est / 2**30:.3f} GiB | {(est + ws) / 2**30:.3f} GiB | {got / 2**30:.3f} GiB | {diff:+.1%} |")
    print(f"\nlargest difference: {worst:.1%}")


if __name__ == "__main__":
    main()
