"""Cutting a config to a few layers for the zoo sweep (npuport.model.hf.zoo.cut_layers) keeps every kind of layer
where the count allows: kinds spread over several per-layer lists, and a repeating kind pattern."""

from __future__ import annotations

from npuport.model.hf.zoo import cut_layers


def test_two_kind_lists_are_covered_by_two_layers() -> None:
    # Kimi-Linear's shape: the first layer is dense, the rest sparse; full attention every fourth layer
    raw = {"model_type": "x", "num_hidden_layers": 8,
           "mlp_layer_types": ["dense"] + ["sparse"] * 7,
           "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]}
    out = cut_layers(raw, 2)
    assert out["num_hidden_layers"] == 2
    assert out["mlp_layer_types"] == ["dense", "sparse"]
    assert out["layer_types"] == ["linear_attention", "full_attention"]
    assert raw["num_hidden_layers"] == 8  # the caller's config is left as it was


def test_a_repeating_block_pattern_keeps_each_kind() -> None:
    # RecurrentGemma's shape: block_types repeats over the layers
    raw = {"model_type": "x", "num_hidden_layers": 26, "block_types": ["recurrent", "recurrent", "attention"]}
    out = cut_layers(raw, 2)
    assert out["num_hidden_layers"] == 2 and out["block_types"] == ["recurrent", "attention"]


def test_one_kind_list_keeps_the_first_of_each_kind_and_fills_with_the_earliest() -> None:
    raw = {"model_type": "x", "num_hidden_layers": 12, "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 6,
           "per_layer": list(range(12))}
    out = cut_layers(raw, 3)
    assert out["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"]
    assert out["per_layer"] == [0, 1, 5]


def test_a_value_that_varies_per_layer_is_read_from_the_first_layer() -> None:
    """transformers raises (a RuntimeError) when a per-layer value is read from a heterogeneous config; the audit's
    global reads (is there attention, how many positions) take the first layer's value instead of failing."""
    from npuport.model.hf.build import config_attr

    class Layer:
        num_attention_heads = 8

    class Heterogeneous:
        per_layer_config = [Layer()]

        @property
        def num_attention_heads(self) -> int:
            raise RuntimeError("'num_attention_heads' is a per-layer attribute and may vary across layers")

    assert config_attr(Heterogeneous(), "num_attention_heads") == 8
    assert config_attr(Heterogeneous(), "n_head", 0) == 0
