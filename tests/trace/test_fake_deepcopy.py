"""`copy.deepcopy` of fake tensors while the audit traces (npuport.trace.run.fake_deepcopy): a model that copies its
cache tensors (Dory's recurrent cache layers) is traced as a real run copies them, one aten::copy_ per tensor."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from npuport.trace.run import fake_deepcopy, new_fake_mode, trace_module


class CopiesItsCache(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a counter made from a Python number: a fake tensor that keeps its value (`constant`), which torch's own
        # Tensor.__deepcopy__ fails on under the fake mode (it copies a CPU storage into a meta tensor)
        cache = {"keys": self.proj(x), "shared": None, "length": torch.tensor(16)}
        cache["shared"] = cache["keys"]
        copied = copy.deepcopy([cache, cache])  # the memo: one copy for the tensor held twice
        assert copied[0] is copied[1] and copied[0]["keys"] is copied[0]["shared"]
        assert copied[0]["keys"] is not cache["keys"]
        return copied[0]["keys"] + x


def test_a_model_copying_its_cache_traces_with_one_copy() -> None:
    mode = new_fake_mode()
    with mode:
        model = CopiesItsCache()
    with fake_deepcopy(), torch.no_grad():
        trace = trace_module(model, lambda: ((torch.randn(4, 8),), {}), mode=mode)
    copies = [c for c in trace.calls if c.op == "aten::copy_"]
    assert sorted(c.inputs[0].shape for c in copies) == [(), (4, 8)]
    assert "__deepcopy__" not in FakeTensor.__dict__  # torch's class as it was after the block


def test_layout_dtype_and_grad_follow_the_original() -> None:
    mode = new_fake_mode()
    with fake_deepcopy(), mode:
        t = torch.empty_strided((3, 5), (1, 3), dtype=torch.bfloat16)
        got = copy.deepcopy(t)
        assert isinstance(got, FakeTensor) and got is not t
        assert (got.shape, got.stride(), got.dtype) == (t.shape, t.stride(), t.dtype)
        leaf = torch.zeros(4, requires_grad=True)
        assert copy.deepcopy(leaf).requires_grad
        expanded = torch.zeros(1, 4).expand(3, 4)  # stride 0: copied as a clone, not into an overlapping layout
        assert copy.deepcopy(expanded).shape == (3, 4)
        with pytest.raises(RuntimeError, match="graph leaves"):
            copy.deepcopy(leaf * 2)  # as torch refuses it for a real tensor
