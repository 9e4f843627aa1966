"""Leaf naming for tensors, tuples, dicts, dataclasses and transformers ModelOutput."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npuport.parity.tree import from_spec, leaf_paths, opaque_types, to_spec


@dataclass
class Out:
    hidden: torch.Tensor
    extra: tuple


def names(obj):
    spec, _ = to_spec(obj)
    return [p for p, _ in leaf_paths(spec)]


def test_structures():
    t = torch.zeros(1)
    assert names(t) == [""]
    assert names((t, None, [t, t])) == ["[0]", "[2][0]", "[2][1]"]
    assert names({"a": t, "b": {"c": t}}) == [".a", ".b.c"]
    assert names(Out(t, (t,))) == [".hidden", ".extra[0]"]


def test_model_output_uses_field_names():
    from transformers.modeling_outputs import CausalLMOutputWithPast

    out = CausalLMOutputWithPast(logits=torch.zeros(2), loss=None)
    assert names(out) == [".logits"]


def test_round_trip_and_opaque():
    class Cache:
        pass

    obj = {"args": (torch.ones(2), 3, None), "kwargs": {"mask": None, "c": Cache(), "eps": 1e-5, "d": torch.float32}}
    spec, tensors = to_spec(obj)
    back = from_spec(spec, tensors)
    assert back["args"][1] == 3 and back["kwargs"]["c"] is None and back["kwargs"]["d"] is torch.float32
    assert torch.equal(back["args"][0], torch.ones(2))
    assert opaque_types(obj) == ["Cache"]
