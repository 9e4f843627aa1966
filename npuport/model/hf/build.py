"""Build any architecture transformers ships from a config alone, on fake tensors, the way it is trained and served.

- composite configs (a text model inside a multimodal config) build their text decoder unless the whole model is
  asked for;
- attention: SDPA where the class supports it, else the class's own default (said in the notes);
- dtype: the config's, else bfloat16;
- no weight initialization runs: init functions read random values (`trunc_normal_` and friends call `.item()`),
  which fake tensors cannot give, and the audit never needs the values.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npuport.errors import NpuportError, describe_exception
from npuport.trace.fast_build import fast_fake_build
from npuport.trace.run import quiet_torch_logs, tolerant_swap

_DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class HFBuild:
    """What was built and the choices made on the way (each choice also a note for the report)."""

    module: torch.nn.Module
    config: Any  # the PretrainedConfig the module was built from (the text part for a composite)
    dtype: torch.dtype
    dtype_source: str  # "--dtype", "config", "default"
    attn: str | None
    part: str  # "text" or "full"
    notes: list[str] = field(default_factory=list)


def config_attr(config: Any, key: str, default: Any = None) -> Any:
    """`getattr(config, key, default)` for heterogeneous configs too: transformers raises (a RuntimeError, not an
    AttributeError) when a value that varies per layer is read from the whole config (dots3's attention heads on its
    sliding layers); then the first layer's value, which says as much as the callers here ask (is there attention,
    how many positions)."""
    try:
        return getattr(config, key, default)
    except RuntimeError:
        layers = getattr(config, "per_layer_config", None)
        try:
            return getattr(layers[0], key, default) if layers else default
        except (RuntimeError, LookupError, TypeError):
            return default


def config_from_raw(raw: dict[str, Any]) -> Any:
    import transformers  # noqa: PLC0415 - optional dependency, imported where it is used

    values = dict(raw)
    model_type = values.pop("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: PLC0415 - optional dependency, imported where it is used

    if model_type not in CONFIG_MAPPING:
        raise NpuportError(f"transformers {transformers.__version__} does not know model_type {model_type!r}",
                           "a model_type of the installed transformers (or a newer transformers)", model_type)
    try:
        with _quiet():
            return transformers.AutoConfig.for_model(model_type, **values)
    except Exception as exc:  # transformers validates configs (strict dataclasses): say which field it refused

        raise NpuportError(f"transformers refused the {model_type} config", "a config the installed transformers accepts",
                           describe_exception(exc)) from None


def config_dtype(config: Any, raw: dict[str, Any] | None = None) -> torch.dtype | None:
    """The dtype the config declares (`dtype` / `torch_dtype`, or its text part's), or None."""
    candidates = []
    if raw:
        candidates += [raw.get("dtype"), raw.get("torch_dtype")]
        for v in raw.values():
            if isinstance(v, dict):
                candidates += [v.get("dtype"), v.get("torch_dtype")]
    candidates.append(getattr(config, "dtype", None))  # not .torch_dtype: reading it logs a deprecation
    for c in candidates:
        if isinstance(c, torch.dtype) and c.is_floating_point:
            return c
        if isinstance(c, str):
            name = c.removeprefix("torch.")
            if name in _DTYPE_NAMES:
                return _DTYPE_NAMES[name]
    return None


def text_part(config: Any) -> Any | None:
    """The text decoder's config inside a composite (multimodal) config; None when the config is one model."""
    get = getattr(config, "get_text_config", None)
    if get is None:
        return None
    try:
        text = get(decoder=True)
    except TypeError:
        text = get()
    if text is config:
        return None
    # only a sub-config held by the config is a separate text model (an encoder-decoder config's "decoder view"
    # is the same model seen differently, not a part)
    return text if any(v is text for v in vars(config).values()) else None


def model_class(config: Any) -> type:
    import transformers  # noqa: PLC0415 - optional dependency, imported where it is used

    mapping = transformers.AutoModelForCausalLM._model_mapping
    try:
        return mapping[type(config)]
    except KeyError:
        pass
    try:
        return transformers.AutoModel._model_mapping[type(config)]
    except KeyError:
        raise NpuportError(f"transformers has no model class for {type(config).__name__}",
                           "a causal-LM (or base model) config", config.model_type) from None


def choose_attn(cls: type, requested: str | None, config: Any = None) -> tuple[str | None, str | None]:
    """(implementation, note). None means the class's own default."""
    if requested and requested != "auto":
        return requested, None
    if getattr(cls, "_supports_sdpa", False):
        return "sdpa", None
    attention = config is None or any(config_attr(config, k) for k in ("num_attention_heads", "n_head", "num_heads"))
    if not attention:  # an attention-free model (Mamba, RWKV): nothing to say
        return None, None
    return None, f"{cls.__name__} has no SDPA path: traced with its own default attention (eager), as a real run would use it"


@contextlib.contextmanager
def skip_weight_init() -> Iterator[None]:
    try:
        from transformers.initialization import no_init_weights  # noqa: PLC0415 - optional dependency, imported where it is used
    except ImportError:  # transformers 4.x
        try:
            from transformers.modeling_utils import no_init_weights  # noqa: PLC0415 - optional dependency, imported where it is used
        except ImportError:
            yield
            return
    with no_init_weights():
        yield


def build(raw: dict[str, Any], dtype: str | None, attn: str | None, mode: Any, part: str = "text",
          name: str = "config") -> HFBuild:
    """Build the model `raw` describes under `mode` (a FakeTensorMode, or a null context for real tensors)."""
    config = config_from_raw(raw)
    notes: list[str] = []
    text = text_part(config)
    part_used = "full"
    if part == "full" and text is not None:
        notes.append(f"{config.model_type} is a composite config: the whole model is built (--hf-part full); the "
                     "scenarios feed token ids only, so parts that take other inputs (images, audio) do not run")
    if part == "text" and text is not None:
        try:
            model_class(text)
        except NpuportError:
            notes.append(f"{config.model_type} is a composite config and its text part {text.model_type} has no "
                         "causal-LM class: the whole model is traced")
        else:
            notes.append(f"{config.model_type} is a composite config: its text decoder ({text.model_type}) is audited "
                         "(the other parts: --hf-part full)")
            config = text
            part_used = "text"
    fake = _is_fake_mode(mode)
    if dtype:
        torch_dtype, dtype_source = parse_dtype(dtype), "--dtype"
    else:
        found = config_dtype(config, raw)
        # real-tensor builds (parity, bench) keep float32 unless asked: their comparisons are defined against it
        default = torch.bfloat16 if fake else torch.float32
        torch_dtype, dtype_source = (found, "config") if found else (default, "default")
    if dtype_source == "default" and fake:
        notes.append("the config names no dtype: traced in bfloat16, as LLMs are trained and served (--dtype to change)")
    cls = model_class(config)
    impl, note = choose_attn(cls, attn, config)
    if note:
        notes.append(note)
    if impl is not None:
        config._attn_implementation = impl
    if _is_moe(config) and hasattr(config, "_experts_implementation"):
        # Routing is data-dependent; the grouped-GEMM experts path has static shapes (every routed token x top_k).
        config._experts_implementation = "grouped_mm"
        if fake and torch_dtype != torch.bfloat16 and dtype_source != "--dtype":
            # torch's grouped GEMM takes bfloat16 only: a dtype the user did not choose must not end the audit
            notes.append(f"the config's {str(torch_dtype).removeprefix('torch.')} is rejected by torch's grouped GEMM "
                         "(bfloat16 only), the path transformers takes for the experts: traced in bfloat16 "
                         "(--dtype to force another)")
            torch_dtype, dtype_source = torch.bfloat16, "default"
    # fake tensors have no values to initialize; real builds (parity, bench) keep transformers' initialization
    init = skip_weight_init() if fake else contextlib.nullcontext()

    swap = tolerant_swap() if fake else contextlib.nullcontext()  # a .to()/.float() inside __init__ on fake params

    with mode, fast_fake_build(mode), init, swap, _quiet(), quiet_torch_logs():
        try:
            try:
                module = cls._from_config(config, dtype=torch_dtype) if hasattr(cls, "_from_config") else cls(config)
            except ValueError as exc:
                if "experts implementation" not in str(exc):
                    raise
                # the class runs its own experts loop (no grouped_mm choice): build it as it is
                config._experts_implementation = None
                module = cls._from_config(config, dtype=torch_dtype) if hasattr(cls, "_from_config") else cls(config)
        except NpuportError:
            raise
        except Exception as exc:
            raise NpuportError(f"building {config.model_type} from {name} failed", "a config transformers can build",
                               describe_exception(exc)) from None
        if fake and hasattr(module, "tie_weights"):
            # skipping init also skips the tying transformers does at the end of it (embedding = LM head)
            module.tie_weights()
    module.train(False)
    return HFBuild(module, config, torch_dtype, dtype_source, getattr(config, "_attn_implementation", impl), part_used, notes)


def _is_fake_mode(mode: Any) -> bool:
    return isinstance(mode, FakeTensorMode)


def _is_moe(config: Any) -> bool:
    return any(config_attr(config, k) for k in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"))


def parse_dtype(name: str) -> torch.dtype:
    if name not in _DTYPE_NAMES:
        raise NpuportError(f"unknown dtype {name!r}", "float32, float16 or bfloat16", name)
    return _DTYPE_NAMES[name]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers logs deprecation notices while building and tracing; they are not findings about the model."""
    try:
        from transformers.utils import logging as hf_logging  # noqa: PLC0415 - optional dependency, imported where it is used
    except ImportError:
        yield
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


quiet_transformers = _quiet
