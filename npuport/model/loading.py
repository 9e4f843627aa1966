"""Turn what the user points at (a model.py, file.py:function, or a Hugging Face config) into a model built
under fake tensors plus a way to make each scenario's inputs.

model.py convention (docs/model-files.md):
    def build_model() -> torch.nn.Module
    def example_inputs(scenario) -> dict | tuple | (tuple, dict) | None   # None: scenario not supported
    def loss_fn(output, inputs) -> torch.Tensor                          # optional, for the training step
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from npuport.coverage.npu_ops import fake_torch_npu
from npuport.errors import NpuportError, describe_exception  # noqa: F401 - describe_exception re-exported
from npuport.model.distributed import Distributed
from npuport.model.hf.build import build, config_attr
from npuport.model.hf.build import parse_dtype as _parse
from npuport.model.hf.inputs import hf_inputs
from npuport.model.scenarios import DEFAULTS, Scenario
from npuport.model.user_code import CudaCalls, compiled_as_eager, compiled_note
from npuport.trace.fast_build import fast_fake_build
from npuport.trace.run import new_fake_mode, tolerant_swap

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass
class LoadedModel:
    """A model ready to run: built under `mode` (a FakeTensorMode for the audit; a no-op context for real runs)."""

    name: str
    origin: str
    module: torch.nn.Module
    mode: Any  # FakeTensorMode, or contextlib.nullcontext() when built with real tensors
    make_inputs: Callable[[Scenario], Inputs | None]
    loss: Callable[[Any, Inputs], torch.Tensor] | None
    source_files: list[Path] = field(default_factory=list)
    max_positions: int | None = None
    dtype: str = "float32"
    config: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)  # choices made while building (dtype, attention, composite part)
    dtype_source: str = "model"  # "model" (as built), "config", "default" or "--dtype"
    attn: str | None = None
    parallelize: Callable[..., Any] | None = None  # the model file's parallelize(model, device_type), if it has one
    distributed: Distributed | None = None  # set when traced as one rank of a job (npuport.model.distributed)
    entry: str | None = None  # a model file's builder when it is not build_model() (`file.py:function`, --entry)

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


_NPU_STAND_IN = contextlib.ExitStack()
atexit.register(_NPU_STAND_IN.close)  # undo the stand-in before interpreter teardown


def _ensure_torch_npu_importable(source: str) -> None:
    """Already-migrated code imports torch_npu: give it the real one, or a stand-in with the npu:: ops' schemas and
    meta kernels (npuport.coverage.npu_ops), kept for the rest of the process so forward can call them."""
    if "torch_npu" not in source or "torch_npu" in sys.modules:
        return

    _NPU_STAND_IN.enter_context(fake_torch_npu())


def _import_file(path: Path) -> ModuleType:
    if not path.exists():
        raise NpuportError(f"model file {path} not found", "a path to an existing Python file", str(path))
    if not path.is_file():
        raise NpuportError(f"{path} is not a file", "a Python file defining build_model()", "a directory")
    if path.suffix != ".py":
        # importlib finds no loader for another suffix; the usual cause is a config.json given without --hf
        raise NpuportError(f"{path} is not a Python model file",
                           "a .py file defining the model; for a Hugging Face config.json use --hf",
                           f"a {path.suffix} file" if path.suffix else "a file without the .py suffix")
    try:
        source = path.read_text(encoding="utf-8")
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise NpuportError(f"{path} has a syntax error at line {exc.lineno}", "valid Python", exc.msg) from None
    except UnicodeDecodeError as exc:
        raise NpuportError(f"{path} is not UTF-8 text", "a Python source file", str(exc)) from None
    except OSError as exc:  # unreadable (permissions, a broken mount): the user's file, not our bug
        raise NpuportError(f"model file {path} could not be read", "a readable Python file",
                           exc.strerror or type(exc).__name__) from None
    _ensure_torch_npu_importable(source)
    name = f"npuport_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # the .py suffix is checked above; kept as a user error all the same
        raise NpuportError(f"{path} is not a Python model file", "a .py file defining the model", str(path))
    mod = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # so model.py can import its sibling modules
    try:
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    except NpuportError:
        raise
    except BaseException as exc:  # the user's module failed: say where, not a traceback
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise NpuportError(f"importing {path.name} failed", "a model file that imports cleanly", describe_exception(exc)) from None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return mod


def _call_user(fn: Callable[..., Any], what: str, *args: Any) -> Any:
    try:
        return fn(*args)
    except NpuportError:
        raise
    except Exception as exc:
        raise NpuportError(f"{what} raised an exception", f"{what} to succeed", describe_exception(exc)) from None


def _normalize_inputs(value: Any, what: str) -> Inputs | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return (), dict(value)
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], dict):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    raise NpuportError(f"{what} returned an unusable value", "a dict of keyword arguments, a tuple of positional arguments, (args, kwargs) or None", type(value).__name__)


def _mode(fake: bool, device: str | None = None) -> Any:
    """Fake tensors for the audit; for real runs the device the model is built on (`torch.device` as a context sets
    the default device: weights and inputs are made there, a 7B model never passes through host memory)."""
    if fake:
        return new_fake_mode()
    return torch.device(device) if device and device != "cpu" else contextlib.nullcontext()


def loss_of(model: LoadedModel, out: Any, inputs: Inputs) -> torch.Tensor:
    """The training loss of one forward: the model file's loss_fn, else the output's `.loss` or a scalar output."""
    if model.loss is not None:
        return model.loss(out, inputs)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None and isinstance(out, torch.Tensor) and out.numel() == 1:
        loss = out
    if not isinstance(loss, torch.Tensor):
        raise NpuportError(
            "the training scenario needs a loss",
            "an output with .loss, a scalar output, or loss_fn(output, inputs) in model.py",
            type(out).__name__,
        )
    return loss


def load_model_file(path: str | Path, entry: str | None = None, fake: bool = True, dtype: str | None = None,
                    device: str | None = None) -> LoadedModel:
    """model.py by convention, or `file.py:function` / `entry` naming the builder function."""
    text = str(path)
    if ":" in text and not Path(text).exists():
        if entry is not None and Path(text.rsplit(":", 1)[0]).exists():
            raise NpuportError("the builder is named twice", "file.py:function or --entry function, not both",
                               f"{text} --entry {entry}")
        if entry is None:
            text, entry = text.rsplit(":", 1)
    file = Path(text)
    mod = _import_file(file)
    builder_name = entry or "build_model"
    builder = getattr(mod, builder_name, None)
    if not callable(builder):
        funcs = sorted(n for n, v in vars(mod).items() if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__)
        raise NpuportError(
            f"{file.name} defines no function {builder_name}()",
            "build_model() and example_inputs(scenario), or --entry file.py:function",
            "functions: " + (", ".join(funcs) if funcs else "none"),
        )
    inputs_fn = getattr(mod, "example_inputs", None)
    loss_fn = getattr(mod, "loss_fn", None)
    declared = _declared_max_positions(mod, file)
    # on fake tensors the model's code runs with .cuda() moving to the audit's device and torch.compile'd code eager
    # (npuport.model.user_code); the notes say where that happened
    notes: list[str] = []
    mode = _mode(fake, device)
    cuda: Any = CudaCalls(notes) if fake else contextlib.nullcontext()
    if fake:
        cuda.watch_devices()
    want = parse_dtype(dtype) if dtype else None
    with mode, fast_fake_build(mode), _default_dtype(want), (tolerant_swap() if fake else contextlib.nullcontext()), \
            cuda, compiled_as_eager(fake) as compiled:
        model = _call_user(builder, f"{builder_name}()")
    if compiled.met:
        notes.append(compiled_note(f"{builder_name}()"))
    if not isinstance(model, torch.nn.Module):
        raise NpuportError(f"{builder_name}() must return a torch.nn.Module", "an nn.Module", type(model).__name__)
    if fake:
        cuda.watch_devices()  # modules build_model() imported
        cuda.hook(model)  # the traced forward
    max_pos = declared
    hf_config = getattr(model, "config", None)
    if max_pos is None and hf_config is not None:
        max_pos = _max_positions(hf_config, _POSITION_KEYS if _is_transformers(hf_config) else _MODEL_FILE_KEYS)
    if not callable(inputs_fn):
        if hf_config is not None and getattr(hf_config, "vocab_size", None):
            make = hf_inputs(model, mode)
        else:
            raise NpuportError(
                f"{file.name} defines no example_inputs(scenario)",
                "a function returning the model's inputs for a scenario (see docs/model-files.md)",
                "no example_inputs",
            )
    else:
        def make(sc: Scenario) -> Inputs | None:
            with mode, cuda, compiled_as_eager(fake) as compiled:
                try:
                    value = _call_user(inputs_fn, f"example_inputs({sc.name!r})", sc)
                except NpuportError as error:
                    raise context_hint(error, sc, max_pos) from None
            if compiled.met and compiled_note("example_inputs()") not in notes:
                notes.append(compiled_note("example_inputs()"))
            return _normalize_inputs(value, "example_inputs()")

    loss = None
    if callable(loss_fn):
        @functools.wraps(loss_fn)  # the audit names the model file's own loss_fn (inspect.unwrap) when it misbehaves
        def loss(out: Any, inputs: Inputs) -> torch.Tensor:
            with cuda:
                return loss_fn(out, inputs)
    return LoadedModel(
        name=(file.resolve().parent.name if file.stem == "model" else file.stem) + ("" if builder_name == "build_model" else f":{builder_name}"),
        origin=str(file),
        entry=None if builder_name == "build_model" else builder_name,
        module=model,
        mode=mode,
        make_inputs=make,
        loss=loss,
        source_files=[file.resolve()],
        max_positions=max_pos,
        dtype=_param_dtype(model),
        notes=notes,
        dtype_source="--dtype" if want is not None else "model",
        parallelize=parallel if callable(parallel := getattr(mod, "parallelize", None)) else None,
    )


def _declared_max_positions(mod: ModuleType, file: Path) -> int | None:
    """MAX_POSITIONS as the model file sets it: a positive int or absent. Anything else would fail far from here
    (a string compared with a length) or pass unnoticed (0 read as 'no limit', True as 1)."""
    value = getattr(mod, "MAX_POSITIONS", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NpuportError(f"MAX_POSITIONS in {file.name} is not a positive integer",
                           "MAX_POSITIONS = <the model's context length in tokens>, an int of at least 1",
                           f"{value!r} ({type(value).__name__})")
    return int(value)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype | None):  # noqa: ANN202 - a context manager
    """--dtype for a model file: the builder's floating tensors are made in it (tied weights stay tied)."""
    if dtype is None:
        yield
        return
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _param_dtype(model: torch.nn.Module) -> str:
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"


_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
# litgpt's and nanoGPT's GPT keep their context limit as config.block_size; in a transformers config block_size is
# something else (BigBird: the block of its sparse attention, 64 tokens), so it is read of a model file's own config only
_MODEL_FILE_KEYS = (*_POSITION_KEYS, "block_size")
# how model code words a step longer than its context: litgpt "Cannot attend to 4097, block size is only 4096 ...
# exceeds the supported context length", nanoGPT "Cannot forward sequence of length 4097, block size is only 1024"
_CONTEXT_ERROR = re.compile(r"block.size|context.length|max(imum)?.seq(uence)?.len|max.positions?|position.embeddings?"
                            r"|cannot (attend|forward)", re.IGNORECASE)


def _is_transformers(config: Any) -> bool:
    return type(config).__module__.startswith("transformers.")


def context_hint(error: NpuportError, sc: Scenario, max_positions: int | None) -> NpuportError:
    """`error` of a default-sized scenario that reads as a step longer than the model's context, with the way out
    added: MAX_POSITIONS in the model file (the scenarios are shortened to it). Sizes the user gave, a known limit or
    another error: `error` as it was."""
    default = DEFAULTS.get(sc.kind)
    if (max_positions is not None or default is None or (sc.batch, sc.seq, sc.past) != (default.batch, default.seq, default.past)
            or not _CONTEXT_ERROR.search(str(error.received or ""))):
        return error
    return NpuportError(error.what, f"{error.expected or 'a model that runs'}; the default {sc.name} scenario takes "
                        f"{sc.seq + sc.past} positions: if the model's context is shorter, set MAX_POSITIONS = <its "
                        "context length> in the model file (scenarios are shortened to fit it) or give --scenario "
                        "sizes within it", error.received)


def _max_positions(config: Any, keys: tuple[str, ...] = _POSITION_KEYS) -> int | None:
    for key in keys:
        val = config_attr(config, key)
        if isinstance(val, int) and val > 0:
            # ProphetNet's `ngram` predicting streams take the positions after the main stream's (1 to ngram further):
            # its real limit is the table's size less ngram (512 - 2: 511 tokens fail in its position embedding on
            # real tensors, in its n-gram reshape on fake ones)
            ngram = config_attr(config, "ngram")
            kind = str(config_attr(config, "model_type") or "")
            if "prophetnet" in kind and isinstance(ngram, int) and 0 < ngram < val:
                return val - ngram
            return val
    return None


def parse_dtype(name: str) -> torch.dtype:
    return _parse(name)


def load_hf_config(path: str | Path, dtype: str | None = None, attn: str | None = None, fake: bool = True,
                   part: str = "text", device: str | None = None) -> LoadedModel:
    """Build a transformers model from a config.json alone: no weights, no download, fake tensors."""
    file = Path(path)
    if file.is_dir():
        raise NpuportError(f"{file} is a folder", "a Hugging Face config.json (the file itself)", str(file))
    if not file.is_file():
        raise NpuportError(f"config file {file} not found", "a Hugging Face config.json", str(file))
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NpuportError(f"{file} is not valid JSON", "a Hugging Face config.json", str(exc)) from None
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise NpuportError(f"{file} has no model_type", "a Hugging Face config.json with a model_type field", f"keys: {sorted(raw)[:8] if isinstance(raw, dict) else type(raw).__name__}")
    try:
        import transformers  # noqa: F401, PLC0415 - optional dependency: only --hf needs it, checked here for a clear error
    except ImportError:
        raise NpuportError("--hf needs the transformers package", "pip install 'npuport[hf]'", "transformers is not installed") from None

    if dtype is not None:
        parse_dtype(dtype)
    mode = _mode(fake, device)
    built = build(raw, dtype, attn, mode, part=part, name=file.name)
    model = built.module
    return LoadedModel(
        name=file.stem,
        origin=str(file),
        module=model,
        mode=mode,
        make_inputs=hf_inputs(model, mode),
        loss=None,
        source_files=[],
        max_positions=_max_positions(built.config),
        dtype=str(built.dtype).removeprefix("torch."),
        config=raw,
        notes=built.notes,
        dtype_source=built.dtype_source,
        attn=built.attn,
    )


def load_target(model: str | None = None, hf_config: str | None = None, entry: str | None = None,
                dtype: str | None = None, attn: str | None = None, fake: bool = True, part: str = "text",
                device: str | None = None) -> LoadedModel:
    """The model the user named, built on fake tensors (audit) or real ones (`fake=False`: parity, bench, profile
    record; `device` builds them there)."""
    if hf_config:
        return load_hf_config(hf_config, dtype=dtype, attn=attn, fake=fake, part=part, device=device)
    if model:
        return load_model_file(model, entry=entry, fake=fake, dtype=dtype, device=device)
    raise NpuportError("no model given", "a model.py or --hf CONFIG.json", "nothing")
