"""`npuport profile record`: run each scenario of a model for real under torch.profiler and keep what it measured.

Per scenario: the model (built on the device, real weights from its initialization) runs `warmup` steps, then
`steps` profiled steps, each ended by a device synchronize so a step's wall time holds its kernels, then
`timed_steps` more without the profiler: their median wall time is the measured step, and the time until the host
had issued a step's last op is its host time. Train is forward + backward (the audit's train step; the
optimizer is not run), prefill a forward under no_grad, decode one token against the cache of `past` tokens: by default given back its `past` tokens (contiguous) after each step,
outside the measurement, so every step runs the audit's shapes; `decode_cache="grow"` lets it grow a token per step
as generation does (on the H200 with torch 2.11 that makes cuDNN attention plan anew for every new length).

Every module call is wrapped in a `record_function("npuport.module:<path>")` annotation (a forward pre-hook opens it,
the forward hook closes it): the Kineto reader gives every op the module it ran in, and the backward ops the module
of the forward op whose autograd node ran them (sequence numbers). Python stacks are not recorded: `with_stack`
slows the host side the measurement is about; source lines come from the audit the profile is joined to.

The raw trace (`SCENARIO.trace.json.gz`) is kept beside the artifact (`SCENARIO.profile.json`). On an NPU
(`--dev npu`) the steps run under the Ascend PyTorch profiler (torch_npu.profiler, set as npu_profiler.py says) and
its export is kept as `SCENARIO_ascend_pt` and read by npuport.profile.ascend; graph mode captures a
torch.npu.NPUGraph. No NPU was available where this was written: that branch has run only with the CPU stand-in
of torch_npu (tests/profile/test_record_npu.py).
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import shutil
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from npuport.cost.timing import is_compiled
from npuport.devices.device import NpuDevice, parse_device
from npuport.devices.profiler_chatter import without_profiler_chatter
from npuport.devices.runtime import backend, device_name, kind_of, resolve, synchronize
from npuport.errors import NpuportError, describe_exception
from npuport.model.hf.build import quiet_transformers
from npuport.model.hf.inputs import real_path
from npuport.model.loading import Inputs, LoadedModel, loss_of
from npuport.model.scenarios import Scenario
from npuport.profile.artifact import to_artifact
from npuport.profile.ascend import read_ascend
from npuport.profile.kineto import MODULE_MARK, SKIP_MARK, read_trace
from npuport.profile.npu_profiler import exported, keep_export, npu_profile
from npuport.trace.run import quiet_torch_logs

Progress = Callable[[str], None]


@dataclass(frozen=True)
class NpuSide:
    """An Ascend NPU to record on: torch_npu (or its CPU stand-in), what to call the device in the artifact."""

    module: Any
    label: str  # "npu:0", or "npu:0 (CPU stand-in, not a real NPU)"
    name: str  # the device's name (torch.npu.get_device_name)


@dataclass(frozen=True)
class Recorded:
    scenario: Scenario
    artifact: dict[str, Any]
    trace_path: Path


@contextlib.contextmanager
def module_annotations(model: torch.nn.Module) -> Iterator[None]:
    """A profiler range named after each module's path around every call of it."""
    open_ranges: list[Any] = []
    handles = []
    for name, mod in model.named_modules():
        label = MODULE_MARK + (name or "(root)")

        def pre(_m: torch.nn.Module, _a: Any, label: str = label) -> None:
            rf = torch.autograd.profiler.record_function(label)
            rf.__enter__()
            open_ranges.append(rf)

        def post(_m: torch.nn.Module, _a: Any, _o: Any) -> None:
            if open_ranges:
                open_ranges.pop().__exit__(None, None, None)

        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        while open_ranges:  # a step that raised leaves ranges open
            open_ranges.pop().__exit__(None, None, None)


def _restore_cache(inputs: Inputs, past: int) -> None:
    """Give a decode step's grown KV cache back its `past` tokens, contiguous as a fresh cache is, so every decode
    step runs the same shapes (a new KV length per step makes some attention libraries plan anew each call: that
    is `--decode-cache grow`). Marked so the trace reader leaves it out of the step."""
    with torch.autograd.profiler.record_function(SKIP_MARK + "restore decode cache"):
        for value in inputs[1].values():
            crop, length = getattr(value, "crop", None), getattr(value, "get_seq_length", None)
            if not (callable(crop) and callable(length)) or int(length()) <= past:
                continue
            crop(past - int(length()))  # transformers' caches crop by a negative count
            for layer in getattr(value, "layers", None) or []:
                for attr in ("keys", "values"):
                    t = getattr(layer, attr, None)
                    if isinstance(t, torch.Tensor) and not t.is_contiguous():
                        setattr(layer, attr, t.contiguous())


def _step(model: LoadedModel, sc: Scenario, inputs: Inputs, forward: Callable[..., Any] | None = None) -> None:
    """One step: the model's forward (or `forward`, its compiled form), and in training the loss's backward."""
    args, kwargs = inputs
    fn = forward if forward is not None else model.module
    if sc.kind == "train":
        out = fn(*args, **kwargs)
        loss_of(model, out, inputs).backward()
        for p in model.module.parameters():
            p.grad = None
    else:
        with torch.no_grad():
            fn(*args, **kwargs)


def _activities(dev: str) -> list[ProfilerActivity]:
    kind = kind_of(dev)
    if kind == "cuda":
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return [ProfilerActivity.CPU]


def record_scenario(model: LoadedModel, sc: Scenario, dev: str, out_dir: Path, warmup: int = 2, steps: int = 3,
                    progress: Progress | None = None, decode_cache: str = "fixed", timed_steps: int = 20,
                    npu: NpuSide | None = None) -> Recorded:
    """Run `sc` for real on `dev` under torch.profiler; write DIR/NAME.trace.json.gz; return the artifact.
    decode_cache: "fixed" restores the cache to `past` tokens after each decode step (every step the same shapes,
    the audit's one step), "grow" lets it grow a token per step as generation does.
    With `npu` (an Ascend NPU, or its CPU stand-in in tests: then `dev` is the torch device the model is on) the
    steps run under the Ascend PyTorch profiler, whose export is kept as DIR/NAME_ascend_pt (npu_profiler.py)."""
    restore = sc.kind == "decode" and bool(sc.past) and decode_cache == "fixed"
    try:
        with model.mode, quiet_transformers(), quiet_torch_logs(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs = model.make_inputs(sc)
    except NpuportError:
        raise
    except Exception as exc:
        raise NpuportError(f"making the inputs of the {sc.name} scenario failed", "a model that runs on its inputs",
                           describe_exception(exc)) from None
    if inputs is None:
        raise NpuportError(f"the model has no {sc.name} scenario", "a scenario its example_inputs() returns", sc.name)
    # The steps run outside model.mode: for a real device that is `torch.device(dev)` as a context, a
    # TorchFunctionMode whose Python hook on every torch call would add host time a user's own run does not have.
    # Weights and inputs are already on the device.
    run: Callable[[], None] = lambda: _step(model, sc, inputs)  # noqa: E731 - one step, eager
    compiled: dict[str, Any] | None = None
    if sc.mode == "graph":
        run = _captured(model, sc, inputs, dev)
        restore = False  # a replay re-runs the captured step on the same buffers: the cache does not grow
    elif is_compiled(sc.mode):
        run, compiled = _compiled(model, sc, inputs, dev, restore)
    mod = backend(dev)
    if mod is not None and hasattr(mod, "reset_peak_memory_stats"):
        mod.reset_peak_memory_stats()
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{sc.name}.trace.json.gz"
    model.module.train(sc.kind == "train")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        try:
            # a compiled step has no module boundaries left to mark (its kernels are fused across them), and hooks
            # added for the profiled steps alone would make dynamo compile the model again for them
            marks = module_annotations(model.module) if not is_compiled(sc.mode) else contextlib.nullcontext()
            profiler = (npu_profile(npu.module, Path(tmp), warmup, steps) if npu is not None
                        else profile(activities=_activities(dev), record_shapes=True, profile_memory=False,
                                     schedule=schedule(wait=0, warmup=warmup, active=steps),
                                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw))))
            with without_profiler_chatter(), real_path(), quiet_transformers(), quiet_torch_logs(), \
                    _no_warnings(), marks, profiler as prof:
                for i in range(warmup + steps):
                    if progress:
                        progress(f"~{sc.name}: step {i + 1}/{warmup + steps}" + (" (warm-up)" if i < warmup else ""))
                    run()
                    synchronize(dev)
                    if restore:
                        _restore_cache(inputs, sc.past)
                    prof.step()
        except NpuportError:
            raise
        except Exception as exc:
            raise NpuportError(f"the model failed while recording {sc.name} on {dev}", "a model that runs there",
                               describe_exception(exc)) from None
        finally:
            model.module.train(False)
        if npu is not None:
            final = keep_export(exported(Path(tmp)), out_dir, sc.name)
        else:
            partial = final.with_name(final.name + ".partial")
            try:
                with raw.open("rb") as src, gzip.open(partial, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
                partial.replace(final)
            finally:  # interrupted while compressing: no half-written file left
                partial.unlink(missing_ok=True)
    try:
        return _finish(model, sc, dev, run, final, warmup, steps, progress, decode_cache, timed_steps, npu, restore,
                       inputs, compiled, mod)
    except BaseException:  # an interrupted or failed scenario leaves no trace without its artifact beside it
        if final.is_dir():
            shutil.rmtree(final, ignore_errors=True)
        else:
            final.unlink(missing_ok=True)
        raise


def _finish(model: LoadedModel, sc: Scenario, dev: str, run: Callable[[], None], final: Path, warmup: int, steps: int,
            progress: Progress | None, decode_cache: str, timed_steps: int, npu: NpuSide | None, restore: bool,
            inputs: Inputs, compiled: dict[str, Any] | None, mod: Any) -> Recorded:
    """The unprofiled timed steps, the host probe and the artifact of a scenario whose trace is written."""
    plain, issued, probes, after = _timed_steps(model, sc, run, dev, timed_steps, progress, restore, inputs)
    if compiled is not None:  # what dynamo compiled by the end: more graphs than at the warm-up's end is a recompile
        after_steps = _dynamo_counts()
        compiled = compiled | {"graphs_after_steps": after_steps["graphs"]}
        if "cudagraph_skips" in compiled:  # a graph left to run without its device graph after the warm-up
            compiled["cudagraph_skips_after_steps"] = after_steps["cudagraph_skips"]
    probe = host_probe(dev)
    art = to_artifact(read_ascend(final) if npu is not None else read_trace(final))
    art["scenario"] = sc.to_json() | {"spec": sc.spec()}
    art["recorded"] = {"device": npu.label if npu is not None else dev,
                       "device_name": npu.name if npu is not None else device_name(dev), "warmup": warmup, "steps": steps,
                       **({"decode_cache": decode_cache} if sc.kind == "decode" else {}),
                       **({"compile": compiled} if compiled is not None else {}),
                       "torch": torch.__version__, "dtype": model.dtype, "model": model.name}
    art["unprofiled"] = {"step_s": plain, "median_s": statistics.median(plain),
                         "host_s": issued, "host_median_s": statistics.median(issued), "probe_s": probes,
                         "probe_after_s": after,
                         "what": "wall time per step (synchronized) of the same steps run again without the profiler, "
                                 "whose own per-op cost inflates the host side of the traced steps (Python's garbage "
                                 "collector collected before, paused during each step); host_s: from the step's start "
                                 "until the host had issued its last op (the call returned, before the synchronize); probe_s: the "
                                 "host probe (300 tiny adds) taken right before each step; probe_after_s: the same probe right after "
                                 "each step's synchronize (the host's speed can change during a step: the mean of the two "
                                 "brackets it)"}
    art["host_probe"] = {"op_s": probe, "what": "host seconds per eager torch.add of 8 elements on the device, "
                                                 "timed right after the steps: how fast this host dispatches"}
    if mod is not None and hasattr(mod, "max_memory_allocated"):
        art["memory"] = {"peak_allocated_bytes": int(mod.max_memory_allocated()),
                         "what": "the caching allocator's peak over the recorded steps (weights included)"}
    return Recorded(sc, art, final)


def _timed_steps(model: LoadedModel, sc: Scenario, run: Callable[[], None], dev: str, steps: int,
                 progress: Progress | None, restore: bool,
                 inputs: Inputs) -> tuple[list[float], list[float], list[float], list[float]]:
    """Wall seconds of `steps` more steps without the profiler, each ended by a device synchronize, and per step
    the seconds until the host had issued its last op (the step's call returned; the device may still be busy) and
    a short host probe taken right before it and right after it."""
    out: list[float] = []
    issued: list[float] = []
    probes: list[float] = []
    after: list[float] = []
    model.module.train(sc.kind == "train")
    try:
        with real_path(), quiet_transformers(), quiet_torch_logs(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gc.collect()  # the profiler's freed events must not be collected inside a timed step
            for i in range(steps):
                if progress:
                    progress(f"~{sc.name}: timing step {i + 1}/{steps} without the profiler")
                # the host's speed right before this step: on a shared host it moves within a run (docs/profile.md)
                probes.append(host_probe(dev, calls=300, repeats=1))
                synchronize(dev)
                gc.disable()
                try:
                    t0 = time.perf_counter()
                    run()
                    t1 = time.perf_counter()
                    synchronize(dev)
                    out.append(time.perf_counter() - t0)
                    issued.append(t1 - t0)
                finally:
                    gc.enable()
                # and right after it: on the lent H200s the host switched speed within a step in 7-18% of the steps,
                # and the mean of the two probes followed the step's host time better than either (docs/profile.md)
                after.append(host_probe(dev, calls=300, repeats=1))
                if restore:
                    _restore_cache(inputs, sc.past)
    finally:
        model.module.train(False)
    return out, issued, probes, after


def _captured(model: LoadedModel, sc: Scenario, inputs: Inputs, dev: str) -> Callable[[], None]:
    """The step captured once as a device graph (`mode=graph`): a CUDA graph, or on an NPU torch.npu.NPUGraph
    (torch_npu's counterpart, inference only: docs/zh/developer_notes/npugraph.md in Ascend/pytorch). Its replay is
    the step with one launch and no host cost per op. Inference steps only; a model that reads a value back inside
    its step cannot be captured, and says why in one line."""
    kind = kind_of(dev)
    mod: Any = backend(dev) if kind in ("cuda", "npu") else None
    graph_cls = getattr(mod, "CUDAGraph" if kind == "cuda" else "NPUGraph", None) if mod is not None else None
    if mod is None or graph_cls is None or sc.kind == "train":
        raise NpuportError(f"graph mode is recorded for prefill and decode on CUDA or an NPU ({sc.spec()} on {dev})",
                           "--dev cuda or npu and an inference scenario (mode=graph)", f"{sc.kind} on {dev}")
    model.module.train(False)
    try:
        with model.mode, real_path(), quiet_transformers(), quiet_torch_logs(), _no_warnings():
            side = mod.Stream()
            side.wait_stream(mod.current_stream())
            with mod.stream(side):  # warm-up on a side stream, as capture wants
                for _ in range(2):
                    _step(model, sc, inputs)
                    if sc.kind == "decode" and sc.past:
                        _restore_cache(inputs, sc.past)
            mod.current_stream().wait_stream(side)
            graph = graph_cls()
            with mod.graph(graph):
                _step(model, sc, inputs)
    except Exception as exc:
        raise NpuportError(f"{sc.spec()}: the step cannot be captured as one device graph as the model is written",
                           "a step with static shapes that never reads a value back to the host",
                           describe_exception(exc)) from None
    return graph.replay


COMPILE_BACKEND = "inductor"  # torch.compile's default; the CPU tests swap in a backend that needs no C++ compiler


def _dynamo_counts() -> dict[str, int]:
    from torch._dynamo.utils import counters  # noqa: PLC0415 - dynamo loads only for a compiled step (it is slow to import)

    return {"graphs": int(counters["stats"]["unique_graphs"]), "graph_breaks": int(sum(counters["graph_break"].values())),
            "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"])}


def _compiled(model: LoadedModel, sc: Scenario, inputs: Inputs, dev: str,
              restore: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    """The step under torch.compile's default mode (`mode=compile`), or under mode="reduce-overhead" (its compiled
    graphs replayed as CUDA graph trees; each step begins with torch.compiler.cudagraph_mark_step_begin(), as a
    generation loop does): compiled with static shapes and warmed up with two steps before anything is profiled or
    timed (the compile is not the step). Graph breaks are allowed, as a user's torch.compile allows them, and counted:
    the artifact says how many graphs the step became, and in reduce-overhead how many of them torch could not
    replay as a device graph (`cudagraph_skips`: those ran as compile mode does)."""
    import torch._dynamo  # noqa: PLC0415 - as above

    torch._dynamo.reset()  # a scenario compiles its own graphs: another scenario's shapes are not its
    torch._dynamo.utils.counters.clear()
    graphed = sc.mode == "reduce-overhead"
    forward = (torch.compile(model.module, backend=COMPILE_BACKEND, dynamic=False, mode="reduce-overhead") if graphed
               else torch.compile(model.module, backend=COMPILE_BACKEND, dynamic=False))
    step_begin = torch.compiler.cudagraph_mark_step_begin if graphed else (lambda: None)
    model.module.train(sc.kind == "train")
    try:
        with real_path(), quiet_transformers(), quiet_torch_logs(), _no_warnings():
            for _ in range(2):
                step_begin()
                _step(model, sc, inputs, forward)
                synchronize(dev)
                if restore:
                    _restore_cache(inputs, sc.past)
    except Exception as exc:
        raise NpuportError(f"{sc.spec()}: torch.compile failed on the step", "a model torch.compile can compile",
                           describe_exception(exc)) from None
    finally:
        model.module.train(False)
    counts = _dynamo_counts()
    facts: dict[str, Any] = {"graphs": counts["graphs"], "graph_breaks": counts["graph_breaks"], "backend": COMPILE_BACKEND}
    if graphed:
        facts |= {"mode": "reduce-overhead", "cudagraph_skips": counts["cudagraph_skips"]}

    def run() -> None:
        step_begin()
        _step(model, sc, inputs, forward)
    return run, facts


@contextlib.contextmanager
def _no_warnings() -> Iterator[None]:
    """Library warnings (the profiler's own cycle notice among them) are not the user's measurement."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def host_probe(dev: str, calls: int = 2000, repeats: int = 3) -> float:
    """Host seconds per eager call of a tiny op: the same model runs slower on a slower or busier host, and a
    measured step is only comparable with an estimate made for the host it ran on."""
    with torch.device(dev) if dev != "cpu" else contextlib.nullcontext():
        x = torch.ones(8)
    best = float("inf")
    for _ in range(repeats):
        synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.add(x, x)
        synchronize(dev)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def resolve_device(dev: str) -> str:
    return resolve(dev)


def npu_side(dev: str) -> tuple[str, NpuSide]:
    """For `--dev npu[:i]`: the torch device the model runs on and the NPU to record with. torch_npu with CANN and
    a device, or (tests, NPUPORT_NPU_STANDIN=1 without torch_npu) its CPU stand-in: the model then runs on the CPU
    and the artifact's device says it was a stand-in. Without either, one line saying so."""
    device = parse_device(dev)
    if not isinstance(device, NpuDevice):
        raise NpuportError(f"{dev!r} is not an NPU", "npu or npu:INDEX", dev)
    device.check_present()
    npu = device.backend
    name = npu.npu.get_device_name() if callable(getattr(npu.npu, "get_device_name", None)) else "npu"
    return device.torch_device, NpuSide(npu, device.label, str(name))
