"""Parameters made directly while a model is built on fake tensors (npuport.trace.fast_build): the same tensors as
the fake dispatcher makes, on every shipped config and a model file, and the same audit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

import npuport.trace.fast_build as fast_build
from npuport.trace.fast_build import _describe, fast_fake_build
from npuport.trace.run import new_fake_mode

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "examples" / "configs").glob("*.json"))


def _tensors(module: torch.nn.Module) -> list[tuple]:
    return [(name, _describe(t)) for name, t in [*module.named_parameters(remove_duplicate=False),
                                                  *module.named_buffers(remove_duplicate=False)]]


@pytest.fixture
def usual(monkeypatch: pytest.MonkeyPatch):
    """Build the usual way (the self-check's answer set to "disagrees")."""
    def use() -> None:
        monkeypatch.setattr(fast_build, "_agrees", False)
    return use


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_shipped_config_builds_the_same_tensors(config: Path, usual) -> None:
    from npuport.model.loading import load_target

    fast = load_target(hf_config=str(config))
    assert fast_build._agrees is True  # the fast way was used
    usual()
    plain = load_target(hf_config=str(config))
    assert _tensors(fast.module) == _tensors(plain.module)
    # tied weights stay tied, the same way
    ids = lambda m: [id(p) for _, p in m.named_parameters(remove_duplicate=False)]  # noqa: E731
    fast_ids, plain_ids = ids(fast.module), ids(plain.module)
    assert [fast_ids.index(i) for i in fast_ids] == [plain_ids.index(i) for i in plain_ids]


def test_model_file_audit_is_the_same(tmp_path: Path, usual) -> None:
    from npuport.api import audit_model

    model = ROOT / "tests" / "fixtures" / "models" / "moe_host_routing.py"
    a = audit_model(model=str(model), scenarios=["train:batch=1,seq=32", "prefill:batch=1,seq=32"])[1]
    usual()
    b = audit_model(model=str(model), scenarios=["train:batch=1,seq=32", "prefill:batch=1,seq=32"])[1]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_hf_audit_is_the_same(tmp_path: Path, usual) -> None:
    from npuport.api import audit_model
    from npuport.model.hf.zoo import cut_layers

    cut = tmp_path / "cfg.json"
    cut.write_text(json.dumps(cut_layers(json.loads((ROOT / "examples" / "configs" / "olmoe-1b-7b.json").read_text()), 2)))
    a = audit_model(hf_config=str(cut))[1]
    usual()
    b = audit_model(hf_config=str(cut))[1]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_factory_forms_and_what_goes_the_usual_way() -> None:
    mode = new_fake_mode()
    with mode, fast_fake_build(mode):
        made = [torch.empty(2, 3), torch.empty((2, 3)), torch.zeros([4]), torch.ones(torch.Size([1, 2]), dtype=torch.float16),
                torch.empty(3, requires_grad=True)]
        p = torch.nn.Parameter(torch.empty(5, 2))
        view = p.detach()
        const = torch.tensor(3)  # a scalar made from a Python number carries its value: its detach is the dispatcher's
        const_detached = const.detach()
        on_meta = torch.empty(2, device="meta")  # meta asked for: the usual way
        out = torch.empty(2, 3)
        strided = torch.empty(2, 3, memory_format=torch.contiguous_format)  # a keyword outside dtype/device/grad
        y = made[0] @ torch.ones(3, 4)
    assert all(type(t) is FakeTensor for t in (*made, p, view, const_detached, out, strided, y))
    assert [tuple(t.shape) for t in made] == [(2, 3), (2, 3), (4,), (1, 2), (3,)]
    assert made[3].dtype == torch.float16 and made[4].requires_grad and made[4].is_leaf
    assert isinstance(p, torch.nn.Parameter) and p.requires_grad and not view.requires_grad
    assert view.untyped_storage()._cdata == p.untyped_storage()._cdata  # detach is an alias of the same storage
    assert const.constant is not None and const_detached.constant is not None  # the value kept
    assert on_meta.device.type == "meta" and type(on_meta) is FakeTensor  # as the dispatcher makes it
    assert tuple(y.shape) == (2, 4)


def test_real_tensors_and_a_failed_self_check_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    with fast_fake_build(contextlib.nullcontext()):  # real tensors: no mode pushed
        assert type(torch.zeros(2)) is torch.Tensor
    monkeypatch.setattr(fast_build, "_agrees", None)
    monkeypatch.setattr(fast_build, "_probe", lambda: (_ for _ in ()).throw(AttributeError("another torch")))
    mode = new_fake_mode()
    with mode, fast_fake_build(mode):
        t = torch.empty(2)
    assert fast_build._agrees is False and type(t) is FakeTensor
