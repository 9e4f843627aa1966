#!/usr/bin/env python3
"""Measure what a real CUDA step allocates, to hold npuport's memory estimate against (docs/memory.md).

Runs on a CUDA machine with torch and transformers only (no npuport): builds the config's model in bf16 with random
weights on the GPU (SDPA attention), then with torch.cuda.max_memory_allocated / memory_allocated:
  weights; a training step (forward with use_cache=False, backward, AdamW foreach step, zero_grad) twice: step 0 and step 1 peaks and
  what is held after the step; a prefill of P tokens (no grad) and its KV cache; one decode token after it.
Usage: python scripts/memory_gpu.py CONFIG.json --train B,S --prefill P [--out FILE.json]
"""

from __future__ import annotations

import argparse
import gc
import json

import torch
import transformers


def measure(config_path: str, train: tuple[int, int], prefill: int) -> dict:
    raw = json.load(open(config_path))
    cfg = transformers.AutoConfig.for_model(**raw)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    torch.cuda.synchronize()
    out: dict = {"config": config_path, "torch": torch.__version__, "transformers": transformers.__version__,
                 "device": torch.cuda.get_device_name(), "weights": torch.cuda.memory_allocated() - base}
    vocab = cfg.vocab_size
    b, s = train
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    ids = torch.randint(0, vocab, (b, s), device="cuda")
    for step in (0, 1):
        torch.cuda.reset_peak_memory_stats()
        res = model(input_ids=ids, labels=ids, use_cache=False)  # as npuport traces a training step
        res.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        out[f"train_step{step}_peak"] = torch.cuda.max_memory_allocated() - base
        del res
        gc.collect()
    out["train_held"] = torch.cuda.memory_allocated() - base
    del opt, ids
    gc.collect()
    torch.cuda.empty_cache()
    model.eval()
    ids = torch.randint(0, vocab, (1, prefill), device="cuda")
    with torch.no_grad():
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        res = model(input_ids=ids, use_cache=True)
        torch.cuda.synchronize()
        out["prefill_peak"] = torch.cuda.max_memory_allocated() - base
        cache = res.past_key_values
        logits_bytes = res.logits.numel() * res.logits.element_size()
        del res
        gc.collect()
        out["kv_cache"] = torch.cuda.memory_allocated() - before
        nxt = torch.randint(0, vocab, (1, 1), device="cuda")
        torch.cuda.reset_peak_memory_stats()
        _step = model(input_ids=nxt, past_key_values=cache, use_cache=True)  # held, as a serving loop holds it
        torch.cuda.synchronize()
        out["decode_peak"] = torch.cuda.max_memory_allocated() - base
        out["prefill_logits"] = logits_bytes
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--train", required=True, help="B,S")
    ap.add_argument("--prefill", type=int, required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    b, s = (int(x) for x in a.train.split(","))
    res = measure(a.config, (b, s), a.prefill)
    print(json.dumps(res))
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
