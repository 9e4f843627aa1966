"""Audit stage 1: run each scenario under the recorder on fake tensors; a scenario that fails is named, not fatal."""

from __future__ import annotations

import contextlib
import inspect
import re
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.utils._pytree import tree_flatten

from npuport.audit.report import TraceStage
from npuport.errors import NpuportError, describe_exception
from npuport.model.distributed import at_rest
from npuport.model.hf import prefill_once
from npuport.model.hf.build import quiet_transformers as _quiet_libraries
from npuport.model.hf.fallbacks import kernel_fallbacks, notes_for
from npuport.model.hf.inputs import real_path
from npuport.model.loading import Inputs, LoadedModel, context_hint, loss_of
from npuport.model.scenarios import Scenario, fit_to_context
from npuport.trace.memory import MemoryTracker
from npuport.trace.recorder import Recorder
from npuport.trace.records import Trace
from npuport.trace.routing import NUMPY_READ, balanced_routing
from npuport.trace.run import fake_deepcopy, inference_as_no_grad, inference_sites
from npuport.trace.run import quiet_torch_logs as _torch_logs_quiet

Progress = Callable[[str], None]
# what fake tensors cannot answer: a value read on the host (.item(), .tolist()), an output shape set by values (nonzero)
_VALUE_READS = (DataDependentOutputException, DynamicOutputShapeException)


def trace_scenario(model: LoadedModel, sc: Scenario, progress: Progress | None = None,
                   reuse: bool = True) -> tuple[Trace | None, Scenario]:
    """Run one scenario under the recorder; None when the scenario does not apply to the model. Returns the scenario
    as it really ran (a decode of a model with no cache re-runs its context). `reuse`: identical decoder layers are
    recorded once (npuport.trace.reuse; never for a distributed rank). A scenario that fails on reading a tensor value
    runs again with the expert routing of MoE code answered as balanced and value assertions taken as holding
    (npuport.trace.routing); when that does not help, the first failure is reported."""
    reuse = reuse and model.distributed is None
    routing = None
    # a deepcopy of a fake tensor as a copy, torch.inference_mode as no_grad: what a device runs (npuport.trace.run)
    with fake_deepcopy(), inference_as_no_grad(rewrite=sc.kind != "train") as inference:
        try:
            trace, ran = _trace_scenario(model, sc, progress, reuse)
        except _ReadsValues as first:
            with balanced_routing() as routing:
                try:
                    trace, ran = _trace_scenario(model, sc, progress, reuse)
                except _ReadsValues as second:
                    # the routing answers got it past the first read: the read that stops it is the later one
                    if routing.answered and second.error.received != first.error.received:
                        e = second.error
                        raise NpuportError(e.what, e.expected, f"{e.received} (after the routing read "
                                           f"{first.error.received} was answered as balanced routing)") from None
                    raise first.error from None
        finally:
            if model.distributed is not None and model.distributed.layout is not None and model.distributed.layout.zero:
                with model.mode:  # the next scenario starts from sharded parameters, as a step does
                    at_rest(model.module)
    if trace is not None and inference.entered and ran.kind == "train":
        trace.notes.append(f"{ran.name}: the forward enters torch.inference_mode at {', '.join(inference.sites[:3])}: "
                           "traced as it runs (no tensor made there is saved for backward); composite ops inside it "
                           "are recorded whole")
    elif trace is not None and inference.entered:
        trace.notes.append(f"{ran.name}: the model runs under torch.inference_mode: traced as torch.no_grad (the same "
                           "kernels run on a device; under inference mode composite ops such as linear would reach "
                           "the trace undecomposed)")
    if trace is not None and routing is not None and routing.answered:
        trace.notes.append(
            f"{ran.name}: the model reads its expert routing on the host (per-expert token counts or expert masks), "
            "which fake tensors cannot answer: traced with the routed tokens spread evenly over the experts (a real "
            "step's FLOPs; a real router's split varies from step to step)")
    if trace is not None and routing is not None and routing.asserted:
        trace.notes.append(
            f"{ran.name}: the model asserts on tensor values (torch._check_tensor_all, e.g. transformers' "
            "torch_compilable_check), which fake tensors cannot answer: traced as holding. On a "
            "device each such check copies a flag to the host, a synchronisation per call in eager mode")
    return trace, ran


def _trace_scenario(model: LoadedModel, sc: Scenario, progress: Progress | None, reuse: bool) -> tuple[Trace | None, Scenario]:
    inputs = _inputs(model, sc, reuse)
    if inputs is None:
        return None, sc
    sc = _as_run(model, sc, inputs)
    # a transient line (leading "~"): the CLI redraws it in place on a terminal and drops it elsewhere
    tick = (lambda n: progress(f"~tracing {sc.name}: {n:,} ops")) if progress else None
    try:
        return _record(model, sc, inputs, real=True, tick=tick, reuse=reuse), sc
    except NpuportError as failed:
        return _as_generate(model, sc, failed, tick, reuse), sc
    except _DataDependent:
        # a guard transformers skips while tracing read a tensor value on the real path: follow the tracing path
        # for this scenario and say so (the inventory may then hold an explicit mask the real run does not build)
        again = _inputs(model, sc, reuse)
        trace = _record(model, sc, again or inputs, real=False, tick=tick, reuse=reuse)
        trace.notes.append(f"{sc.name}: traced along transformers' export path (a value-dependent check on the real "
                           "path cannot run on fake tensors)")
        return trace, sc


def _as_generate(model: LoadedModel, sc: Scenario, failed: NpuportError, tick: Callable[[int], None] | None,
                 reuse: bool) -> Trace:
    """A decode step that failed on the plain inputs (the new token and the cache), run again with the inputs
    transformers' generate() passes; the first failure stands when that does not help either."""
    make = getattr(model.make_inputs, "as_generate", None)
    try:
        again = make(sc) if make is not None else None
    except Exception:  # noqa: BLE001 - the model's own input preparation failed: the first failure is the answer
        again = None
    if again is None:
        raise failed
    try:
        trace = _record(model, sc, again, real=True, tick=tick, reuse=reuse)
    except (NpuportError, _DataDependent):
        raise failed from None
    trace.notes.append(f"{sc.name}: traced with the inputs transformers' generate() passes (prepare_inputs_for_generation): "
                       f"the model's forward fails on the new token and the cache alone ({failed.render()})")
    return trace


def _inputs(model: LoadedModel, sc: Scenario, reuse: bool) -> Inputs | None:
    try:
        with _torch_logs_quiet(), prefill_once.allowed(reuse):  # the decode cache's prefill: identical layers once
            return model.make_inputs(sc)
    except NpuportError:
        raise
    except Exception as exc:
        what = "building the cache for" if sc.kind == "decode" else "making the inputs of"
        error = NpuportError(f"{what} the {sc.name} scenario failed", "a model that runs on its inputs",
                             describe_exception(exc))
        if _reads_value(exc):
            raise _ReadsValues(error) from None
        raise error from None


def _reads_value(exc: BaseException) -> bool:
    return isinstance(exc, _VALUE_READS) or isinstance(exc, RuntimeError) and NUMPY_READ in str(exc)


class _ReadsValues(Exception):
    """The scenario failed on reading a tensor value; `error` is what the user is told unless routing answers help."""

    def __init__(self, error: NpuportError) -> None:
        super().__init__(error.render())
        self.error = error


class _DataDependent(Exception):
    pass


def _record(model: LoadedModel, sc: Scenario, inputs: Inputs, real: bool, tick: Callable[[int], None] | None = None,
            reuse: bool = True) -> Trace:
    args, kwargs = inputs
    module = model.module
    was_training = module.training
    module.train(sc.kind == "train")
    path = real_path() if real else contextlib.nullcontext()
    try:
        with model.mode, Recorder(module, sc.name, tick, reuse=reuse) as rec, MemoryTracker(rec.stack, rec) as mem, warnings.catch_warnings(), \
                _quiet_libraries(), _torch_logs_quiet(), path:
            warnings.simplefilter("ignore")  # library deprecation chatter is not the user's audit
            mem.seed(module, [args, kwargs])
            grad = contextlib.nullcontext() if sc.kind == "train" else torch.no_grad()
            with grad:
                out = module(*args, **kwargs)
                if sc.kind == "train":
                    loss = _loss(model, out, inputs)
                    mem.forward_done()
                    rec.backward(loss)
                    del loss
            rec.trace.memory = mem.finish(module)
            del out
            for p in module.parameters():  # the next scenario starts from the weights alone
                p.grad = None
    except NpuportError:
        raise
    except DataDependentOutputException as exc:
        if real and model.config is not None:
            raise _DataDependent() from exc
        raise _ReadsValues(_value_read(sc, exc)) from None
    except DynamicOutputShapeException as exc:  # kept off the export-path retry above: HF MoE code reaches it routed
        raise _ReadsValues(_value_read(sc, exc)) from None
    except Exception as exc:
        error = _failure(model, sc, exc)
        if _reads_value(exc):
            raise _ReadsValues(error) from None
        raise error from None
    finally:
        module.train(was_training)
    return rec.trace


# ops whose output size is a count of values, with the way to write them that fake tensors (and graph capture) can size
_SIZED_BY_VALUES = {
    "repeat_interleave": "pass output_size= (the sum of the repeats) to repeat_interleave",
    "nonzero": "a boolean mask or torch.where(cond) selects as many elements as the data says and fake tensors have no "
               "data: torch.nonzero_static(..., size=) or mask arithmetic (x * mask) instead",
    "masked_select": "masked_select keeps as many elements as the data says and fake tensors have no data: mask "
                     "arithmetic (x * mask) instead",
    "unique": "torch.unique returns as many values as the data holds and fake tensors have no data",
}


def _value_read(sc: Scenario, exc: Exception) -> NpuportError:
    """A value read (.item()) or an output sized by values (nonzero of a mask): the code, not the inputs, is what
    fake tensors cannot run; the hint names the form they can."""
    op = str(exc.args[0]) if isinstance(exc, DynamicOutputShapeException) and exc.args else ""
    hint = next((h for key, h in _SIZED_BY_VALUES.items() if key in op), "")
    return NpuportError(f"the model failed on the {sc.name} inputs", "code that does not read tensor values (fake "
                        "tensors have none)" + (f"; {hint}" if hint else ""), describe_exception(exc))


def _loss(model: LoadedModel, out: Any, inputs: Inputs) -> torch.Tensor:
    """The train scenario's loss. The model file's loss_fn is named when it is what raised (not the model's forward),
    and a loss autograd recorded nothing for is explained here: backward would only say 'element 0 of tensors does
    not require grad'."""
    try:
        loss = loss_of(model, out, inputs)
    except NpuportError:
        raise
    except Exception as exc:
        if model.loss is None or _reads_value(exc):
            raise  # the output's own .loss, or a value read (routing answers may still get past it)
        raise NpuportError("loss_fn(output, inputs) raised (inputs is the (args, kwargs) pair the forward was called "
                           "with, not what example_inputs returned)", "a loss_fn that unpacks `args, kwargs = inputs` "
                           "and returns a scalar tensor", describe_exception(exc)) from None
    if model.loss is not None and not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
        raise _bad_loss(model, _described(loss), "reduce it to one number, e.g. .mean()"
                        if isinstance(loss, torch.Tensor) else "",
                        _described(loss) if isinstance(loss, torch.Tensor) else type(loss).__name__)
    if isinstance(loss, torch.Tensor) and not loss.requires_grad and _records_no_grad(model.module, out):
        site = _no_grad_site(model.module)
        raise NpuportError("the train scenario cannot trace a training step: the model's forward runs under "
                           "torch.inference_mode / no_grad, so autograd records nothing to backpropagate",
                           "a forward that records gradients (drop the decorator for training, or audit only "
                           "prefill and decode)", site or "a loss with no grad_fn from a forward that records none")
    if model.loss is not None and not loss.requires_grad:
        raise _bad_loss(model, "a tensor that does not require grad", "computed from the output, not detached or "
                        "under torch.no_grad()", _described(loss) + " with no grad_fn")
    return loss


def _bad_loss(model: LoadedModel, what: str, hint: str, received: str | None = None) -> NpuportError:
    """loss_fn returned something backward cannot start from: said here, at the loss_fn's def line, since backward
    would fail on it with an error that blames nothing the user wrote ('cannot create weak reference to NoneType')."""
    fn = inspect.unwrap(model.loss) if model.loss is not None else None
    code = getattr(fn, "__code__", None)
    site = f" at {Path(code.co_filename).name}:{code.co_firstlineno}" if code is not None else ""
    return NpuportError(f"loss_fn returned {what}{site}", "a scalar tensor that requires grad" + (f": {hint}" if hint else ""),
                        received or what)


def _described(value: Any) -> str:
    if value is None:
        return "None"
    name = f"{str(value.dtype).removeprefix('torch.')} tensor" if isinstance(value, torch.Tensor) else type(value).__name__
    detail = f"of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else f"({value!r:.40})"
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name} {detail}"


def _records_no_grad(module: torch.nn.Module, out: Any) -> bool:
    """Parameters want gradients but no output tensor of the forward carries one: autograd was off in the forward
    (a loss_fn that detaches is another mistake, left to backward's own message)."""
    if not any(p.requires_grad for p in module.parameters()):
        return False
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and not any(t.requires_grad for t in tensors)  # no tensor seen: no verdict


# a decorator or a `with` that turns autograd off: @torch.inference_mode(), @torch.no_grad(), torch.no_grad()
_NO_GRAD_MARK = re.compile(r"@?\s*(?:torch\.)?(?:autograd\.)?(?:grad_mode\.)?(?:inference_mode|no_grad)\([^)]*\)")


def _no_grad_site(module: torch.nn.Module) -> str | None:
    """'@torch.inference_mode() at model.py:12': the first forward among the model's own module classes (torch's are
    skipped) whose source turns autograd off; None when none does (the no-grad region is outside the forwards)."""
    seen: set[type] = set()
    for m in module.modules():
        cls = type(m)
        if cls in seen or cls.__module__.startswith("torch."):
            continue
        seen.add(cls)
        forward = inspect.unwrap(cls.forward)  # a decorated forward's own source starts at its decorators
        try:
            lines, start = inspect.getsourcelines(forward)
            file = inspect.getsourcefile(forward)
        except (OSError, TypeError):  # defined where no source is kept (a REPL, a compiled module)
            continue
        for i, line in enumerate(lines):
            found = _NO_GRAD_MARK.search(line.split("#", 1)[0])
            if found and file:
                return f"{found.group(0).strip()} at {Path(file).name}:{start + i}"
    return None


def _failure(model: LoadedModel, sc: Scenario, exc: Exception) -> NpuportError:
    """The model's forward or backward raised. As one rank of a job its modules run on their shards, so a shape
    error is the layout's before it is the inputs': the error names the layout."""
    if isinstance(exc, NotImplementedError) and "npuport cannot trace the higher-order operator" in str(exc):
        return NpuportError("the model uses a higher-order operator npuport cannot trace", "FlexAttention's (the one "
                            "recorded) or plain torch code in its place", describe_exception(exc))
    if "Inference tensors cannot be saved for backward" in str(exc):  # a training step through inference mode
        sites = inference_sites()
        return NpuportError("the train scenario cannot trace a training step: a tensor made under torch.inference_mode "
                            "reaches an op that saves it for backward (a real step raises 'Inference tensors cannot be "
                            "saved for backward' there too)", "torch.no_grad() for a part that needs no gradient, or "
                            "audit only prefill and decode", "torch.inference_mode() at " + (", ".join(sites[:3]) or
                                                                                              describe_exception(exc)))
    info = model.distributed
    if info is not None and info.layout is not None:
        return NpuportError(f"the model cannot run {sc.name} laid out as --parallel {info.layout.describe()}",
                            "a layout whose shards the model's forward accepts (transformers' tensor-parallel plan "
                            "applied by torch's parallelize_module, FSDP2 per decoder layer)"
                            + ("; try another tp" if info.layout.tp > 1 else "")
                            + ("; FSDP2 needs one dtype per wrapped module: zero=0 (DDP) traces this model"
                               if info.layout.zero and "uniform original parameter dtype" in str(exc) else ""),
                            describe_exception(exc))
    if info is not None and info.how.startswith("parallelize()"):
        return NpuportError(f"the model cannot run {sc.name} as its parallelize() sharded it "
                            f"(rank {info.rank} of {info.world_size})", "a parallelize(model, device_type) whose shards "
                            "the model's forward accepts", describe_exception(exc))
    # a default-sized step longer than the model's context (nanoGPT's assert): the way out is MAX_POSITIONS
    return context_hint(NpuportError(f"the model failed on the {sc.name} inputs", "example inputs that fit the model",
                                     describe_exception(exc)), sc, model.max_positions)


def _as_run(model: LoadedModel, sc: Scenario, inputs: Inputs) -> Scenario:
    """A decode whose inputs hold no cache of `past` positions but the whole context re-runs it per token."""
    if sc.kind != "decode" or not sc.past:
        return sc
    recomputes = getattr(model.make_inputs, "recomputes", None)
    if recomputes is not None:
        return replace(sc, recompute=bool(recomputes(sc)))
    tensors = [t for t in tree_flatten(list(inputs))[0] if isinstance(t, torch.Tensor)]
    if any(sc.past in t.shape for t in tensors):
        return sc
    if any(sc.past + sc.seq in t.shape for t in tensors):
        return replace(sc, recompute=True)
    return sc


def _skip_reason(model: LoadedModel, sc: Scenario) -> str:
    if getattr(model.make_inputs, "encoder", False) and sc.kind == "decode":
        return f"{sc.name}: skipped: the model is a bidirectional encoder (every token attends to every other), so it has no token-by-token decode"
    return f"{sc.name}: skipped (example_inputs returned None)"


def trace_stage(model: LoadedModel, scenarios: list[Scenario], progress: Progress | None = None,
                reuse: bool = True) -> TraceStage:
    """Trace every scenario; raise only when none could be traced (then with the one reason, or all names)."""
    notes: list[str] = []  # the model's own notes are taken after tracing: running its code adds some (.cuda() lines)
    traces: dict[str, Trace] = {}
    used: list[Scenario] = []
    timings: dict[str, float] = {}
    failed: list[tuple[str, str]] = []
    errors: list[NpuportError] = []
    with kernel_fallbacks() as fallbacks:
        for sc in scenarios:
            sc, note = fit_to_context(sc, model.max_positions)
            if note:
                notes.append(note)
            if progress:
                progress(f"tracing {sc.describe()}")
            t0 = time.perf_counter()
            try:
                trace, sc = trace_scenario(model, sc, progress, reuse)
            except NpuportError as exc:  # the other scenarios still report; this one is named with its reason
                failed.append((sc.name, exc.render()))
                errors.append(exc)
                if progress and len(scenarios) > 1:
                    progress(f"{sc.name} failed: {exc.render()}")
                continue
            finally:
                timings[f"trace_{sc.name}_s"] = time.perf_counter() - t0
            if trace is None:
                notes.append(_skip_reason(model, sc))
                continue
            if sc.recompute:
                notes.append(f"{sc.name}: the model keeps no KV cache, so each new token re-runs the whole "
                             f"{sc.past + sc.seq}-token context (traced as such)")
            notes.extend(trace.notes)
            traces[sc.name] = trace
            used.append(sc)
    notes = list(model.notes) + notes + notes_for(fallbacks)
    if not traces:
        if len(errors) == 1:
            raise errors[0]
        if failed:
            name, reason = failed[0]
            raise NpuportError(f"no scenario could be traced ({', '.join(n for n, _ in failed)} failed)",
                               "a model that runs on its inputs", f"{name}: {reason}")
        raise NpuportError("no scenario could be traced", "example_inputs(scenario) to return inputs for at least one scenario", ", ".join(s.name for s in scenarios))
    return TraceStage(used, traces, failed, notes, timings)
