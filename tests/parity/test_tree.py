"""Leaf naming for tensors, tuples, dicts, dataclasses and transformers ModelOutput."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npuport.parity.tree import call_leaves, flatten, from_spec, leaf_paths, opaque_types, to_spec


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


def test_call_leaves_are_flattens_leaves():
    """The lean capture's shortcut for a call's args and kwargs names and orders leaves exactly as flatten does."""
    t, p = torch.zeros(1), torch.nn.Parameter(torch.ones(1))  # a subclass takes the generic walk
    args = (t, None, 3, (t, p), [t, {"x": t}], Out(t, (None, t))) + tuple(torch.full((1,), float(i)) for i in range(8))
    kwargs = {"mask": None, "use_cache": False, "position_ids": t, "position_embeddings": (t, p), "pair": (t, 2),
              "state": {"k": (t,)}, "w": p, "empty": ()}
    got: list = []
    call_leaves(args, kwargs, got)
    want: list = []
    flatten(args, ".args", want)
    flatten(kwargs, ".kwargs", want)
    assert [(k, id(v)) for k, v in got] == [(k, id(v)) for k, v in want] and len(got) == 21
