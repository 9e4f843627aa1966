"""Regressions from auditing third-party model code: which calls sync the host (timing.yaml sync_ops, overload- and
argument-aware), what a failing loss_fn or a no-grad training forward reports, and when NPB062 (SDPA backend flags)
fires. Each model is a small file written to tmp_path and audited as a user would."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from npuport.api import audit_model
from npuport.cost.timing import is_sync
from npuport.errors import NpuportError
from npuport.trace.records import TensorMeta, TensorRef


def _model(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def _line(path: Path, needle: str) -> str:
    """'model.py:N' of the first line of `path` holding `needle`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return f"{path.name}:{next(i for i, line in enumerate(lines, 1) if needle in line)}"


def _audit(path: Path, *scenarios: str) -> dict[str, Any]:
    _, data = audit_model(model=str(path), scenarios=list(scenarios))
    return data


# ---------------------------------------------------------------- 1. host syncs
_REPEAT = """
    import torch, torch.nn as nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(64, 64)

        def forward(self, x):
            y = self.l(x)
            a = y.repeat_interleave(4, dim=1)
            b = torch.repeat_interleave(y, 2, dim=1)
            r = torch.full((x.shape[1],), 2, dtype=torch.long)
            c = y.repeat_interleave(r, dim=1, output_size=2 * x.shape[1])
            return a.sum() + b.sum() + c.sum()

    def build_model():
        return M()

    def example_inputs(sc):
        return (torch.randn(sc.batch, sc.seq, 64),)
"""


def test_repeat_interleave_with_int_repeats_or_output_size_does_not_sync(tmp_path: Path) -> None:
    data = _audit(_model(tmp_path, _REPEAT), "prefill:batch=1,seq=16", "train:batch=1,seq=16")
    ops = {o["op"] for o in data["ops"]}
    # the method and the function with an int count are recorded as the self_int overload (the NPU runs it whole)
    assert {"aten::repeat_interleave.self_int", "aten::repeat_interleave.self_Tensor"} <= ops, sorted(ops)
    assert [s["step"]["syncs"] for s in data["scenarios"]] == [0, 0]


_WHERE = """
    import torch, torch.nn as nn, torch.nn.functional as F

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = nn.Linear(64, 4)
            self.e = nn.ModuleList(nn.Linear(64, 64) for _ in range(4))

        def forward(self, x):
            x = x.flatten(0, 1)
            mask = F.one_hot(self.g(x).topk(2, dim=-1).indices, 4).permute(2, 1, 0)
            out = torch.zeros_like(x)
            for e in range(4):
                _, t = torch.where(mask[e])
                out.index_add_(0, t, self.e[e](x[t]))
            return out

    def build_model():
        return M()

    def example_inputs(sc):
        return (torch.randn(sc.batch, sc.seq, 64),)
"""


def test_torch_where_of_a_mask_syncs_once_per_call(tmp_path: Path) -> None:
    # traced with the routing answered (npuport.trace.routing); the NPU runs where(cond) whole, as aten::where
    data = _audit(_model(tmp_path, _WHERE), "prefill:batch=1,seq=16")
    assert next(o["calls"] for o in data["ops"] if o["op"] == "aten::where") == 4
    assert data["scenarios"][0]["step"]["syncs"] == 4


@dataclass
class _Call:
    op: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    inputs: tuple[TensorMeta, ...] = ()
    phase: str = "forward"


def _t(i: int, dtype: str = "int64") -> TensorMeta:
    return TensorMeta(i, (16,), dtype)


def test_sync_rules_follow_overload_and_arguments() -> None:
    x, rep = _t(0, "float32"), _t(1)
    # a repeats tensor with no output_size: the kernel reads the repeats' sum back to size its output
    assert is_sync(_Call("aten::repeat_interleave.self_Tensor", (TensorRef(0), TensorRef(1)), {"dim": 0}, (x, rep)))
    assert is_sync(_Call("aten::repeat_interleave.Tensor", (TensorRef(0),), {}, (rep,)))
    assert not is_sync(_Call("aten::repeat_interleave.Tensor", (TensorRef(0),), {"output_size": 32}, (rep,)))
    assert not is_sync(_Call("aten::repeat_interleave.self_int", (TensorRef(0), 4), {"dim": 0}, (x,)))
    # a native composite's backward is reported under its forward's name and runs no size read
    assert not is_sync(_Call("aten::repeat_interleave.self_Tensor", phase="backward", inputs=(x,)))
    # advanced indexing syncs with a bool / uint8 mask (expanded through nonzero), not with integer indices
    assert is_sync(_Call("aten::index.Tensor", (TensorRef(0), [TensorRef(1)]), {}, (x, _t(1, "bool"))))
    assert is_sync(_Call("aten::index.Tensor", (TensorRef(0), [None, TensorRef(1)]), {}, (x, _t(1, "uint8"))))
    assert not is_sync(_Call("aten::index.Tensor", (TensorRef(0), [TensorRef(1)]), {}, (x, rep)))
    # torch.where(cond) (nonzero under the hood) syncs; the elementwise select where(cond, a, b) does not
    assert is_sync(_Call("aten::where", (TensorRef(0),), {}, (_t(0, "bool"),)))
    assert not is_sync(_Call("aten::where.self", (TensorRef(0), TensorRef(1), TensorRef(2)), {}, (_t(0, "bool"), x, x)))
    # ops whose output size is data-dependent sync in every overload and phase
    for op in ("aten::nonzero", "aten::masked_select", "aten::_unique2", "aten::unique_dim", "aten::_local_scalar_dense"):
        assert is_sync(_Call(op, inputs=(x,))), op
        assert is_sync(_Call(op, inputs=(x,), phase="backward")), op
    assert not is_sync(_Call("aten::add.Tensor", (TensorRef(0), TensorRef(0)), {}, (x,)))


# ---------------------------------------------------------------- 2. loss_fn errors
_LOSS = """
    import torch, torch.nn as nn, torch.nn.functional as F

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.Embedding(100, 32)
            self.h = nn.Linear(32, 100)

        def forward(self, idx):
            return self.h(self.e(idx))

    def build_model():
        return M()

    def example_inputs(sc):
        return (torch.randint(0, 100, (sc.batch, sc.seq)),)

    def loss_fn(output, inputs):
        {unpack}
        return F.cross_entropy(output.flatten(0, 1), idx.flatten())
"""


def test_a_failing_loss_fn_is_named_with_what_it_receives(tmp_path: Path) -> None:
    path = _model(tmp_path, _LOSS.replace("{unpack}", "(idx,) = inputs"))
    with pytest.raises(NpuportError) as err:
        _audit(path, "train:batch=1,seq=16")
    text = err.value.render()
    assert "loss_fn(output, inputs) raised" in text, text
    assert "(args, kwargs)" in text and _line(path, "(idx,) = inputs") in text, text
    assert "example inputs that fit the model" not in text, text


def test_loss_fn_gets_the_args_kwargs_pair(tmp_path: Path) -> None:
    data = _audit(_model(tmp_path, _LOSS.replace("{unpack}", "(idx,), _ = inputs")), "train:batch=1,seq=16")
    assert [s["name"] for s in data["scenarios"]] == ["train"]


def test_model_files_doc_says_what_loss_fn_receives() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "model-files.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| `loss_fn(output, inputs)`"))
    assert "(args, kwargs)" in row, row


# ---------------------------------------------------------------- 3. NPB062 only with SDPA backend flags
_SDPA = """
    import torch, torch.nn as nn, torch.nn.functional as F
    {imports}

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x):
            q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 16).permute(2, 0, 3, 1, 4)
            {attend}
            return y.sum()

    def build_model():
        return M()

    def example_inputs(sc):
        return (torch.randn(sc.batch, sc.seq, 64),)
"""
_PLAIN = "y = F.scaled_dot_product_attention(q, k, v, is_causal=True)"


def _npb062(tmp_path: Path, imports: str, attend: str) -> tuple[list[dict[str, Any]], Path]:
    path = _model(tmp_path, _SDPA.replace("{imports}", imports).replace("{attend}", attend))
    data = _audit(path, "prefill:batch=1,seq=16")
    return [f for f in data.get("findings") or [] if f["id"] == "NPB062"], path


def test_npb062_is_silent_without_backend_flags(tmp_path: Path) -> None:
    assert _npb062(tmp_path, "", _PLAIN)[0] == []


def test_npb062_fires_where_sdpa_kernel_picks_a_backend(tmp_path: Path) -> None:
    attend = ("with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n"
              "                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    found, path = _npb062(tmp_path, "from torch.nn.attention import sdpa_kernel, SDPBackend", attend)
    assert len(found) == 1, found
    text = found[0]["message"]
    assert "torch.nn.attention.sdpa_kernel" in text and _line(path, "with sdpa_kernel") in text, found


def test_npb062_fires_on_a_global_backend_flag(tmp_path: Path) -> None:
    # in a function the audit never calls: a process-wide flag set here would change later tests' SDPA traces
    flag = "def math_only():\n        torch.backends.cuda.enable_flash_sdp(False)"
    found, path = _npb062(tmp_path, flag, _PLAIN)
    assert len(found) == 1, found
    assert f"torch.backends.cuda.enable_flash_sdp at {_line(path, 'enable_flash_sdp')}" in found[0]["message"], found


# ---------------------------------------------------------------- 4. a training step under no-grad
_NO_GRAD = """
    import torch, torch.nn as nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(8, 8)

        @torch.{mode}()
        def forward(self, x):
            return self.l(x).sum()

    def build_model():
        return M()

    def example_inputs(sc):
        return (torch.randn(sc.batch, sc.seq, 8),)
"""


@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_train_under_inference_mode_says_why(tmp_path: Path, mode: str) -> None:
    path = _model(tmp_path, _NO_GRAD.replace("{mode}", mode))
    with pytest.raises(NpuportError) as err:
        _audit(path, "train:batch=1,seq=4")
    text = err.value.render()
    assert "inference_mode / no_grad" in text and "training step" in text, text
    assert f"@torch.{mode}() at {_line(path, '@torch.')}" in text, text
    assert "does not require grad" not in text, text
