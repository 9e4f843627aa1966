"""Same weights, same inputs, pinned numerics: prepare the model once on the CPU, then run it on any device.

Weights are generated on the CPU under a seed (`torch.manual_seed(seed)` before the model is built) and moved,
so every device sees the same values; inputs are made the same way with seed + 1. A record stores both (or, with
`--stats-only`, the seed, the generator spec and a fingerprint, so the other machine regenerates the weights and
proves they are identical before comparing).
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from npuport.devices.device import Device, NumericsPolicy
from npuport.errors import NpuportError
from npuport.model.loading import LoadedModel, describe_exception, load_target, parse_dtype
from npuport.model.scenarios import Scenario, fit_to_context, parse_scenario
from npuport.parity.capture import run_capture
from npuport.parity.entries import Capture, CaptureOptions
from npuport.parity.identity import check_same_model, file_note, model_identity
from npuport.parity.modes import FaultMode, Float64Mode
from npuport.parity.shards import full_value
from npuport.parity.tree import from_spec, map_tensors, opaque_types, to_spec
from npuport.trace.modules import ModuleStack

GENERATOR = "npuport.seeded-cpu-build/1"  # torch.manual_seed(seed); build the model on the CPU; eval()


@dataclass(frozen=True)
class Target:
    model: str | None = None
    hf_config: str | None = None
    entry: str | None = None
    dtype: str | None = None
    attn: str = "sdpa"


@dataclass(frozen=True)
class RunOptions:
    scenario: str = "prefill:batch=1,seq=128"
    seed: int = 0
    capture: CaptureOptions = field(default_factory=CaptureOptions)
    policy: NumericsPolicy = field(default_factory=NumericsPolicy)
    train_mode: bool = False  # dropout and other training-mode behaviour on (RNG streams differ across devices)
    store_weights: bool | None = None  # default: stored unless stats-only

    @property
    def parsed_scenario(self) -> Scenario:
        return parse_scenario(self.scenario)


@dataclass
class Prepared:
    lm: LoadedModel
    scenario: Scenario
    inputs: Any  # {"args": tuple, "kwargs": dict}, CPU tensors
    signature: str
    fingerprint: str
    inputs_fingerprint: str
    notes: list[str] = field(default_factory=list)


@dataclass
class LiveSide:
    device: Device
    module: torch.nn.Module
    capture: Capture
    settings: dict[str, Any]


def signature(module: torch.nn.Module) -> str:
    """Names, shapes and dtypes of the state dict: equal for the same architecture, whatever the values."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}\n".encode())
    return h.hexdigest()


def fingerprint(tensors: dict[str, torch.Tensor] | list[torch.Tensor]) -> str:
    items = tensors.items() if isinstance(tensors, dict) else enumerate(tensors)
    h = hashlib.blake2b(digest_size=16)
    for name, t in items:
        t = full_value(t).detach().cpu().contiguous()  # a sharded weight counts whole: the same on any layout
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}\n".encode())
        if t.numel():
            h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))  # type: ignore[arg-type]  # numpy arrays are buffers
    return h.hexdigest()


def prepare(target: Target, opts: RunOptions, weights: dict[str, torch.Tensor] | None = None,
            recorded: dict[str, Any] | None = None, stored_inputs: Any = None) -> Prepared:
    """Build on the CPU under the seed; with a recorded manifest, prove it is the same model and weights."""
    torch.manual_seed(opts.seed)
    lm = load_target(model=target.model, hf_config=target.hf_config, entry=target.entry, dtype=target.dtype,
                     attn=target.attn, fake=False)
    if target.dtype and not target.hf_config:
        lm.module.to(parse_dtype(target.dtype))
    lm.module.train(opts.train_mode)
    sig = signature(lm.module)
    notes: list[str] = []
    if recorded is not None:  # another config (rope_theta, say) keeps the signature and seeded weights: said first
        live = dict(model_identity(lm.config, lm.module, lm.source_files), origin=lm.origin)
        check_same_model(recorded["model"], live)
        note = file_note(recorded["model"], live, "the model file differs from the record's")
        if note:
            notes.append(note)
    if recorded is not None and recorded["model"]["signature"] != sig:
        raise NpuportError("the artifact was recorded from another model",
                           f"model {recorded['model']['name']!r} with state-dict signature {recorded['model']['signature'][:12]}",
                           f"{lm.name!r} with signature {sig[:12]}")
    if weights is not None:
        lm.module.load_state_dict(weights, strict=True)
        notes.append("weights loaded from the artifact")
    fp = fingerprint(lm.module.state_dict())
    if recorded is not None and weights is None and recorded["weights"]["fingerprint"] != fp:
        raise NpuportError("weights regenerated from the seed differ from the recorded ones",
                           f"fingerprint {recorded['weights']['fingerprint'][:16]} (torch {recorded['weights']['torch']})",
                           f"{fp[:16]} with torch {torch.__version__}: record without --stats-only, or with --store-weights")
    sc, fitted = fit_to_context(opts.parsed_scenario, lm.max_positions)  # e.g. decode's default past=4096 on a 1024-position model
    if fitted:
        notes.append(fitted)
    if stored_inputs is not None:
        inputs = stored_inputs
    else:
        torch.manual_seed(opts.seed + 1)
        made = lm.make_inputs(sc)
        if made is None:
            raise NpuportError(f"the model has no inputs for scenario {sc.name!r}", "example_inputs(scenario) to return inputs", "None")
        args, kwargs = made
        if "use_cache" in kwargs:
            kwargs = dict(kwargs, use_cache=False)  # the KV cache object is not compared; its tensors are the k/v outputs
            notes.append("use_cache=False (the KV cache object is not compared)")
        if target.dtype and not target.hf_config:
            want = parse_dtype(target.dtype)
            args, kwargs = map_tensors((args, kwargs), lambda t: t.to(want) if t.is_floating_point() else t)
        inputs = {"args": tuple(args), "kwargs": dict(kwargs)}
    _, tensors = to_spec(inputs)
    ifp = fingerprint(tensors)
    if recorded is not None and stored_inputs is None and recorded["inputs"]["fingerprint"] != ifp:
        raise NpuportError("inputs regenerated from the seed differ from the recorded ones",
                           f"fingerprint {recorded['inputs']['fingerprint'][:16]}", ifp[:16])
    return Prepared(lm, sc, inputs, sig, fp, ifp, notes)


def inputs_from_artifact(manifest: dict[str, Any], tensors: list[torch.Tensor]) -> Any:
    spec = manifest["inputs"].get("spec")
    return from_spec(spec, tensors) if manifest["inputs"].get("stored") else None


def input_record(prep: Prepared) -> tuple[dict[str, Any], list[torch.Tensor]]:
    spec, tensors = to_spec(prep.inputs)
    opaque = opaque_types(prep.inputs)
    info = {"seed_offset": 1, "fingerprint": prep.inputs_fingerprint, "stored": not opaque, "spec": spec, "opaque": opaque}
    return info, (tensors if not opaque else [])


def place(prep: Prepared, device: Device) -> torch.nn.Module:
    module = prep.lm.module
    if device.float64:
        return copy.deepcopy(module).to(torch.float64)
    if device.torch_device == "cpu":
        return module  # the forward does not change weights: share the CPU copy
    return copy.deepcopy(module).to(device.torch_device)


def device_inputs(inputs: Any, device: Device) -> Any:
    def move(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device.torch_device)
        return t.to(torch.float64) if device.float64 and t.is_floating_point() else t
    if opaque_types(inputs):
        # A stateful input (a decode step's KV cache object) is each side's own copy, its tensors on the side's
        # device: a forward appends to the cache it is given, so a shared one gave the second side a longer past
        # (cpu against cpu diverged in decode), and a cache left on the CPU does not fit a model on the GPU.
        inputs = copy.deepcopy(inputs)
        _move_state(inputs, move, torch.device(device.torch_device), set())
    return map_tensors(inputs, move)


def _move_state(obj: Any, move: Callable[[torch.Tensor], torch.Tensor], where: torch.device, seen: set[int]) -> Any:
    """`obj` with its tensors moved: containers rebuilt, other objects' attributes replaced in place (a cache's
    tensors, and the device it says its layers are on)."""
    if isinstance(obj, torch.Tensor):
        return move(obj)
    if isinstance(obj, torch.device):
        return where
    if isinstance(obj, (list, tuple)):
        return type(obj)(_move_state(v, move, where, seen) for v in obj) if type(obj) in (list, tuple) else obj
    if isinstance(obj, dict):
        return {k: _move_state(v, move, where, seen) for k, v in obj.items()}
    state = getattr(obj, "__dict__", None)
    if state is None or id(obj) in seen or isinstance(obj, (type, torch.nn.Module)):
        return obj
    seen.add(id(obj))
    for key, value in list(state.items()):
        state[key] = _move_state(value, move, where, seen)
    return obj


def modes_for(device: Device) -> Callable[[ModuleStack], list[Any]]:
    def make(stack: ModuleStack) -> list[Any]:
        out: list[Any] = []
        if device.float64:
            out.append(Float64Mode())
        if device.fault is not None:
            out.append(FaultMode(device.fault, stack.current))
        return out
    return make


@contextlib.contextmanager
def default_dtype(device: Device) -> Any:
    old = torch.get_default_dtype()
    if device.float64:
        torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def run_side(prep: Prepared, device: Device, opts: RunOptions, module: torch.nn.Module | None = None) -> LiveSide:
    device.check_present()
    settings = device.set_numerics_policy(opts.policy)
    module = module if module is not None else place(prep, device)
    device.seed(opts.seed + 2)
    inputs = device_inputs(prep.inputs, device)
    cap_opts = compiled_capture(prep, device, opts.capture)
    with default_dtype(device):
        try:
            cap = run_capture(module, inputs["args"], inputs["kwargs"], cap_opts, modes_for(device), device.synchronize,
                              loss_of=_loss_fn(prep, inputs))
        except NpuportError:
            raise
        except Exception as exc:
            raise NpuportError(f"the model failed on {device.label}", "a forward that runs on this device",
                               describe_exception(exc)) from None
    if device.fault is not None and not cap.fault_hits:
        fault_never_fired(device, module, cap.fault_seen)
    return LiveSide(device, module, cap, settings)


def fault_never_fired(device: Device, module: torch.nn.Module, seen: list[str]) -> None:
    """A fault whose op never ran inside its module perturbs nothing: the run would pass and prove nothing about
    localisation. Said as an input error, with what did run there (or the module names it may have meant)."""
    fault = device.fault
    assert fault is not None
    if seen:
        raise NpuportError(f"the fault {device.spec} never fired: {fault.op} never ran inside {fault.module}",
                           f"an op that runs there ({', '.join(seen[:8])}{', ...' if len(seen) > 8 else ''})", fault.op)
    names = [n for n, _ in module.named_modules() if n]
    if fault.module in names:
        raise NpuportError(f"the fault {device.spec} never fired: {fault.module} ran no op in this step",
                           "a module that runs ops in this scenario", fault.module)
    close = difflib.get_close_matches(fault.module, names, n=3) or names[:3]
    raise NpuportError(f"the fault {device.spec} never fired: the model has no module {fault.module}",
                       f"a module path of the model, such as {', '.join(close)}", fault.module)


COMPILE_BACKEND = "inductor"  # torch.compile's default, on CUDA and (torch_npu's) on the NPU; tests swap in aot_eager


def compiled_capture(prep: Prepared, device: Device, capture: CaptureOptions) -> CaptureOptions:
    """The capture options of a side for the scenario's mode. mode=compile: the step under torch.compile, its inputs,
    outputs and gradients captured (capture.py), except on the float64 golden, which stays eager (it is the exact
    reference, not a compiled kernel), with a note; mode=reduce-overhead as mode=compile, with a note. mode=graph:
    eager, with a note: a captured graph replays the kernels its capture recorded, the ones the eager step launches,
    so the numbers are the eager step's."""
    mode = prep.scenario.mode
    if mode == "graph":
        _note(prep, "mode=graph: parity runs the step eagerly (a device graph replays the kernels the eager step "
                    "launched when it was captured: the same numbers)")
        return capture
    if mode == "reduce-overhead":
        _note(prep, "mode=reduce-overhead: parity runs the step under torch.compile's default mode (its graphs, "
                    "replayed as device graphs, run the same compiled kernels: the same numbers)")
    elif mode != "compile":
        return capture
    if device.fault is not None:
        raise NpuportError("fault injection runs the model eagerly", "a fault device without mode=compile",
                           f"{device.spec} with {prep.scenario.spec()}")
    if device.float64:
        _note(prep, f"mode=compile: {device.spec} (the float64 golden) runs eagerly; the other sides under "
                    f"torch.compile ({COMPILE_BACKEND})")
        return capture
    if capture.ops or capture.keep:
        _note(prep, "mode=compile: op outputs and kept modules are not captured under torch.compile (hooks and "
                    "dispatch modes would change what it compiles)")
    return replace(capture, compiled=COMPILE_BACKEND, ops=False, op_sequence=False, keep=())


def _note(prep: Prepared, text: str) -> None:
    if text not in prep.notes:
        prep.notes.append(text)


def _loss_fn(prep: Prepared, inputs: Any) -> Callable[[Any], torch.Tensor]:
    def loss_of(out: Any) -> torch.Tensor:
        if prep.lm.loss is not None:
            return prep.lm.loss(out, (inputs["args"], inputs["kwargs"]))
        for getter in (lambda o: o.loss, lambda o: o["loss"]):
            try:
                value = getter(out)
            except (AttributeError, KeyError, TypeError):
                continue
            if isinstance(value, torch.Tensor):
                return value
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            return out
        raise NpuportError("backward capture needs a loss", "loss_fn(output, inputs) in the model file, output.loss, or a scalar output",
                           type(out).__name__)
    return loss_of
