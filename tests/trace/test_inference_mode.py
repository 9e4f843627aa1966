"""A forward under `torch.inference_mode()` is traced as `no_grad` (npuport.trace.run.inference_as_no_grad): the same
kernels a device runs, composite ops decomposed, priced as the matmuls they are; torch's own class is left as it was."""

from __future__ import annotations

from pathlib import Path

import torch

from npuport.api import audit_model
from npuport.trace.run import inference_as_no_grad, new_fake_mode, trace_callable

MODEL = '''import torch


class Served(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 32, bias=False)

    @torch.inference_mode()
    def forward(self, x):
        return torch.einsum("bsh,bth->bst", self.proj(x), self.proj(x))


def build_model():
    return Served()


def example_inputs(scenario):
    return None if scenario.kind == "train" else (torch.randn(scenario.batch, scenario.seq, 64),)
'''


def test_an_inference_mode_forward_is_priced_as_its_matmuls(tmp_path: Path) -> None:
    path = tmp_path / "served.py"
    path.write_text(MODEL, encoding="utf-8")
    _, data = audit_model(model=str(path), scenarios=["prefill:batch=2,seq=16"])
    ops = {o["op"]: o for o in data["ops"]}
    assert "aten::linear" not in ops and "aten::einsum" not in ops  # decomposed, as a device runs them
    assert any("inference_mode" in n for n in data["notes"])
    # two projections (2 x 16 x 64 -> 32) and the batched product (2 x 16 x 16 over 32)
    assert data["scenarios"][0]["flops"] == 2 * (2 * 2 * 16 * 64 * 32) + 2 * 2 * 16 * 16 * 32


def test_torch_inference_mode_is_restored_and_false_keeps_grad() -> None:
    mode = new_fake_mode()
    with mode:
        lin = torch.nn.Linear(8, 8)
        x = torch.randn(4, 8)
    seen = []

    def step() -> None:
        with torch.inference_mode():
            seen.append(torch.is_grad_enabled())
            with torch.inference_mode(False):
                seen.append(torch.is_grad_enabled())
            lin(x)
        seen.append(torch.is_grad_enabled())

    with inference_as_no_grad() as used:
        trace = trace_callable(lin, step, "prefill", mode)
    assert used.entered == 1 and seen == [False, False, True]
    assert [c.op for c in trace.calls if c.kind == "compute"] == ["aten::addmm"]
    with torch.inference_mode():
        assert torch.is_inference_mode_enabled()
