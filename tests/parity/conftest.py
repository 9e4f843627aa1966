"""Tiny models for parity tests: a 2-layer Llama config (hidden 64) and a hand-written model file."""

from __future__ import annotations

import json

import pytest

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}

MODEL_PY = '''
import torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.proj = nn.Linear(32, 16)
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        h = F.gelu(self.fc(x))
        return {"y": self.drop(self.proj(h)) + x, "aux": (h.mean(), None)}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(16, 4)
    def forward(self, x):
        for b in self.blocks:
            x = b(x)["y"]
        return self.head(x)

def build_model():
    return Net()

def example_inputs(scenario):
    return {"x": torch.randn(scenario.batch, scenario.seq, 16)}

def loss_fn(output, inputs):
    return output.float().pow(2).mean()
'''


@pytest.fixture(scope="session")
def llama_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cfg") / "tiny-llama.json"
    path.write_text(json.dumps(LLAMA))
    return str(path)


@pytest.fixture(scope="session")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("mdl") / "model.py"
    path.write_text(MODEL_PY)
    return str(path)


@pytest.fixture
def standin_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUPORT_NPU_STANDIN", "1")


def fault(op: str = "aten::mul.Tensor", module: str = "model.layers.1.mlp", scale: float | None = None) -> str:
    return f"cpu-fault:{op}@{module}" + (f"*{scale}" if scale is not None else "")


SCEN = "prefill:batch=1,seq=16"
