from __future__ import annotations

import json
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "models"

# A LLaMA architecture small enough to trace and run in well under a second on a laptop CPU.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "torch_dtype": "float32", "hidden_act": "silu",
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "tiny-llama.json"
    path.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_audit(tiny_llama: Path):
    from npuport.bench.runner import audit_for_bench

    return audit_for_bench(None, str(tiny_llama), None, "prefill:batch=1,seq=32", "H200", None, "sdpa", lambda m: None)
