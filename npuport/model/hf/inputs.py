"""Inputs for each scenario of a transformers model, and the cache decode runs against, made by the model itself.

Decode: a prefill of `past` tokens runs first on fake tensors (not recorded) and its returned cache is what the
decode step reads, so MLA latent caches, sliding-window, shared-layer and SSM / hybrid states are whatever the model
really keeps. A model that returns no cache recomputes the whole context for every new token: its decode step is a
forward over past + 1 tokens, labelled as such. Encoders (bidirectional attention) have no decode step.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from dataclasses import replace
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException

from npuport.model.hf.build import config_attr, quiet_transformers
from npuport.model.hf.prefill_once import layers_once
from npuport.model.scenarios import Scenario

Inputs = tuple[tuple, dict]
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads", "decoder_attention_heads",
              "num_key_value_heads")
_CACHE_FIELDS = ("cache", "past_key_values", "cache_params", "state", "mems")


@contextlib.contextmanager
def real_path() -> Iterator[None]:
    """Make transformers take the path a real run takes under fake tensors.

    transformers treats a FakeTensor as "being traced" (`is_tracing`) and then, for export's sake, builds an explicit
    causal mask where a real run passes none, which also drops SDPA's `enable_gqa` and repeats K/V. The audit is
    not an export: for the duration of the trace a fake tensor is an ordinary tensor to transformers. The guards
    that then read tensor values get the answer a real run gets for the audit's inputs (no padding, no packed
    sequences: positions are 0..n-1 in every row).
    """
    # only what is already loaded: a model that never imported transformers has no guard to patch (and importing
    # transformers here would cost seconds, and trips over a torch_npu stand-in without a module spec)
    import_utils: Any = sys.modules.get("transformers.utils.import_utils")  # Any: its attributes are patched below
    if import_utils is None:
        yield
        return
    original = getattr(import_utils, "is_fake_tensor", None)
    if original is None:
        yield
        return
    def not_fake(x: Any) -> bool:
        return False

    patches: list[tuple[Any, str, Any]] = [(import_utils, "is_fake_tensor", not_fake)]
    masking_utils = sys.modules.get("transformers.masking_utils")
    if masking_utils is not None and hasattr(masking_utils, "find_packed_sequence_indices"):
        packed = masking_utils.find_packed_sequence_indices

        def find_packed(position_ids: torch.Tensor, *a: Any, **k: Any) -> Any:
            if not original(position_ids):
                return packed(position_ids, *a, **k)
            # The real run computes the packed-sequence mask, checks it on the host and, for positions 0..n-1 in
            # every row (the audit's), finds no packing. Same ops here, except the host read of the check's answer.
            import_utils.is_fake_tensor = original
            try:
                mask = packed(position_ids, *a, **k)
            finally:
                import_utils.is_fake_tensor = not_fake
            if mask is not None:
                (mask[:, -1] == 0).all()
            return None

        patches.append((masking_utils, "find_packed_sequence_indices", find_packed))
    if masking_utils is not None and hasattr(masking_utils, "fast_all"):
        all_true = masking_utils.fast_all

        def fast_all(tensor: torch.Tensor) -> Any:
            out = all_true(tensor)  # the same ops a real run issues (sum, eq)
            # The audit's inputs have no padding: every attention mask transformers builds for them is all ones, and
            # the checks reached on the paths it runs (q == kv length, or one query) ask exactly that.
            return True if original(out) else out

        patches.append((masking_utils, "fast_all", fast_all))
    if masking_utils is not None and hasattr(masking_utils, "_ignore_bidirectional_mask_sdpa"):
        bidirectional = masking_utils._ignore_bidirectional_mask_sdpa

        def ignore_bidirectional(padding_mask: Any, kv_length: int, local_attention_size: Any = None, *a: Any, **k: Any) -> Any:
            if padding_mask is None or not original(padding_mask):
                return bidirectional(padding_mask, kv_length, local_attention_size, *a, **k)
            padding_mask.all()  # the real run's check; its answer for the audit's inputs (no padding) is True
            return local_attention_size is None or kv_length < local_attention_size

        patches.append((masking_utils, "_ignore_bidirectional_mask_sdpa", ignore_bidirectional))
    modeling_utils = sys.modules.get("transformers.modeling_utils")
    PreTrainedModel = getattr(modeling_utils, "PreTrainedModel", None)
    if PreTrainedModel is not None and hasattr(PreTrainedModel, "warn_if_padding_and_no_attention_mask"):
        def warn_if_padding(self: Any, input_ids: Any, attention_mask: Any) -> None:
            # A real run looks for the pad token at both ends of each row (to warn, nothing else): same ops here,
            # without the host read of the answer.
            pad = getattr(self.config, "pad_token_id", None)
            if attention_mask is None and pad is not None and isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2:
                (input_ids[:, [-1, 0]] == pad).any()

        patches.append((PreTrainedModel, "warn_if_padding_and_no_attention_mask", warn_if_padding))
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, new in patches:
        setattr(obj, name, new)
    try:
        yield
    finally:
        for obj, name, old in saved:
            setattr(obj, name, old)


def is_encoder(config: Any) -> bool:
    """A bidirectional encoder (BERT and kin) used through its LM head: no autoregressive decode. Such types are in
    transformers' masked-LM mapping; their config turns causal attention on only with `is_decoder`."""
    if getattr(config, "is_decoder", False) or getattr(config, "is_encoder_decoder", False):
        return False
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES as masked  # noqa: PLC0415 - optional dependency, imported where it is used
    except ImportError:
        return False
    return getattr(config, "model_type", "") in masked


def vocab_size(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in ("vocab_size", "n_vocab", "padded_vocab_size"):
        v = config_attr(text, key) or config_attr(config, key)
        if isinstance(v, int) and v > 0:
            return v
    return 32000


def hf_inputs(model: torch.nn.Module, mode: Any, notes: list[str] | None = None) -> Callable[[Scenario], Inputs | None]:
    """Token ids for any transformers LM; decode gets the cache the model itself returns after `past` tokens."""
    config = model.config
    vocab = vocab_size(config)
    encoder = is_encoder(config)
    caches: dict[tuple[int, int], Any] = {}

    def make(sc: Scenario) -> Inputs | None:
        if sc.kind == "decode" and encoder:
            return None
        with mode:
            if sc.kind != "decode" or not sc.past:
                ids = torch.randint(0, vocab, (sc.batch, sc.seq))
                kwargs: dict[str, Any] = {"input_ids": ids, "use_cache": sc.kind != "train" and not encoder}
                if sc.kind == "train":
                    kwargs["labels"] = ids
                if encoder:
                    kwargs.pop("use_cache")
                return (), kwargs
            key = (sc.batch, sc.past)
            if key not in caches:
                caches[key] = _cache_for(model, sc.batch, sc.past, vocab)
            name, cache = caches[key]
            if cache is None:  # no cache: the step re-reads the whole context
                ids = torch.randint(0, vocab, (sc.batch, sc.past + sc.seq))
                return (), {"input_ids": ids, "use_cache": False}
            ids = torch.randint(0, vocab, (sc.batch, sc.seq))
            return (), {"input_ids": ids, name: cache, "use_cache": True}

    def as_generate(sc: Scenario) -> Inputs | None:
        """The decode step's inputs as transformers' generate() passes them (prepare_inputs_for_generation), over a
        freshly built cache: for a forward that wants more than the new token (CPM-Ant slices the cached prefix off
        the full input_ids itself). None when the model has no such step."""
        prepare = getattr(model, "prepare_inputs_for_generation", None)
        if sc.kind != "decode" or not sc.past or encoder or prepare is None:
            return None
        with mode:
            caches.pop((sc.batch, sc.past), None)  # the failed step may have grown the cache: build it again
            name, cache = caches[(sc.batch, sc.past)] = _cache_for(model, sc.batch, sc.past, vocab)
            if cache is None:
                return None
            ids = torch.randint(0, vocab, (sc.batch, sc.past + sc.seq))
            position = torch.arange(sc.past, sc.past + sc.seq)
            with quiet_transformers():
                kwargs = prepare(ids, **{name: cache}, use_cache=True, cache_position=position)
        return (), {k: v for k, v in kwargs.items() if v is not None}

    make.as_generate = as_generate  # type: ignore[attr-defined]
    make.recomputes = lambda sc: sc.kind == "decode" and sc.past and not encoder and caches.get((sc.batch, sc.past), ("", 0))[1] is None  # type: ignore[attr-defined]
    make.encoder = encoder  # type: ignore[attr-defined]
    return make


def _cache_for(model: torch.nn.Module, batch: int, past: int, vocab: int) -> tuple[str, Any]:
    """The model's cache after `past` tokens. A model whose cache does not grow with the context (Mamba, RWKV,
    xLSTM: a fixed-size state) gets it from a short prefill, so its per-token reference loop does not run `past`
    times just to build it; whether it grows is measured, not assumed (the same cache after 8 and 16 tokens)."""
    config: Any = model.config  # a transformers config (nn.Module's __getattr__ types it Tensor | Module)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    attention = any(config_attr(text, k) for k in _HEAD_KEYS)  # attention keeps K/V per token: no probe
    if past > 16 and not attention:
        short = _prefill_cache(model, batch, 8, vocab)
        if short[1] is not None and _shapes(short[1]) == _shapes(_prefill_cache(model, batch, 16, vocab)[1]):
            return short
    return _prefill_cache(model, batch, past, vocab)


def _shapes(obj: Any, depth: int = 0, seen: set[int] | None = None) -> list[tuple[int, ...]]:
    """Shapes of every tensor a cache object holds (attributes, lists, dicts), in a stable order."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return [tuple(obj.shape)]
    if depth > 4 or id(obj) in seen or obj is None or isinstance(obj, (str, int, float, bool)):
        return []
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = [v for k, v in sorted(vars(obj).items()) if not k.startswith("__")]
    else:
        return []
    out: list[tuple[int, ...]] = []
    for item in items:
        out.extend(_shapes(item, depth + 1, seen))
    return out


def _prefill_cache(model: torch.nn.Module, batch: int, past: int, vocab: int) -> tuple[str, Any]:
    """Run the model over `past` tokens (fake tensors, not recorded) and return (kwarg name, cache) it hands back."""
    ids = torch.randint(0, vocab, (batch, past))

    was = model.training
    model.train(False)

    try:
        try:
            with torch.no_grad(), real_path(), quiet_transformers(), layers_once(model):
                out = model(input_ids=ids, use_cache=True)
        except DataDependentOutputException:  # a value-dependent check on the real path: take the tracing path
            with torch.no_grad(), quiet_transformers(), layers_once(model):
                out = model(input_ids=ids, use_cache=True)
    finally:
        model.train(was)
    params = _forward_params(model)
    for name in _CACHE_FIELDS:
        cache = getattr(out, name, None) if not isinstance(out, dict) else out.get(name)
        if cache is not None:
            # pass it back under the name the forward takes now (transformers renames these across releases)
            if name not in params:
                name = next((n for n in _CACHE_FIELDS if n in params), name)
            return name, cache
    return "", None


def _forward_params(model: torch.nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def decode_label(sc: Scenario) -> Scenario:
    """The decode scenario as it really runs for a model with no cache."""
    return replace(sc, recompute=True)
