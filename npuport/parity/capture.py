"""Capture every submodule's inputs and outputs (and optionally every aten op's outputs, and gradients) of one step.

Module boundaries come from forward pre-hooks and hooks on each submodule; ops from a dispatch mode (OpTap). A
tensor seen twice (a layer's output is the next layer's input) is stored once: entries point at blobs. In "full"
mode a blob is a host copy of the tensor; in "stats" mode its statistics are reduced on the device in batches
(stats.py) and the tensor is never copied, except for modules matching `keep` (kept in full for replay).
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from dataclasses import replace
from typing import Any, Callable

import torch

from npuport.parity.entries import Capture, CaptureOptions
from npuport.parity.modes import OpTap
from npuport.parity.recorders import Layout, LeanStatsRecorder, ValueRecorder
from npuport.parity.stats import StatsBatcher
from npuport.trace.compiler_logs import compiler_output
from npuport.trace.modules import ModuleStack


def _wrapped(inner: Callable[..., Any], path: str, owner: "Capturer") -> Callable[..., Any]:
    """A thin wrapper for one module instance's forward. Why not a forward hook: any hook sends every call of the
    module through nn.Module's slow path (hook dictionaries, kwargs plumbing), which measured about twice the
    wrapper's cost per call; a model without hooks keeps the fast path and pays one Python call. Modules that already
    carry hooks of their own (or are scripted) are left to the hook-based recorder, so their hooks keep running in the
    same order relative to the capture. Only the instance is touched, never a class or a torch function, and the
    original forward is put back on exit (`Capturer.__exit__`)."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        rec = owner._lean_rec
        if rec is not None:
            rec.record(path, args, kwargs, out)
        return out

    forward.__wrapped__ = inner  # type: ignore[attr-defined]  # inspect.signature(mod.forward) still sees the real one
    return forward


def lean_eligible(opts: CaptureOptions) -> bool:
    """Whether `LeanStatsRecorder` captures everything these options ask for (besides the device's modes)."""
    return opts.mode == "stats" and not (opts.ops or opts.op_sequence or opts.backward or opts.keep)


class Capturer:
    """Hooks attached once, any number of captured steps (a training loop capturing every step pays the hook
    registration once). `modes(stack)` gives the device's dispatch modes (faults, float64), entered innermost
    first; the op tap goes on top so it sees what they produced."""

    def __init__(self, root: torch.nn.Module, opts: CaptureOptions, modes: Callable[[ModuleStack], list[Any]],
                 synchronize: Callable[[], None], loss_of: Callable[[Any], torch.Tensor] | None = None) -> None:
        self.root, self.opts, self.modes, self.synchronize, self.loss_of = root, opts, modes, synchronize, loss_of
        self.stack = ModuleStack(root)
        self._attached: Any = None
        self._undo: list[tuple[dict[str, Any], bool, Any]] = []

    _compiled_fn: Callable[..., Any] | None = None  # the root under torch.compile, made on the first compiled step

    def __enter__(self) -> "Capturer":
        if self.opts.compiled:  # no hooks: see _compiled_step
            self.lean = False
            return self
        names = self.stack.names
        self.lean = (lean_eligible(self.opts) and not self.modes(self.stack)
                     and not any(isinstance(m, torch.jit.ScriptModule) or m._forward_hooks or m._forward_pre_hooks for m in names))
        if self.lean:
            # Why not an ExitStack of undo callbacks and `mod.forward = ...`: on a one-shot capture (what `parity
            # record` runs) attaching and detaching that way cost 2.3 and 1.2 ms of host time on an H200 host for
            # TinyLlama's 290 modules; forward is never a parameter, buffer or submodule, so nn.Module.__setattr__ has
            # nothing to do, and a list of (instance dict, had, original) undoes it in one loop.
            undo = self._undo = []
            for mod, path in names.items():
                d = mod.__dict__
                undo.append((d, "forward" in d, d.get("forward")))
                d["forward"] = _wrapped(mod.forward, path, self)
        else:
            self._attached = self.stack.attached()
            self._attached.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.opts.compiled:
            return
        if self.lean:
            for d, had, inner in self._undo:
                if had:
                    d["forward"] = inner
                else:
                    d.pop("forward", None)
            self._undo = []
        else:
            self._attached.__exit__(*exc)

    _resolved: CaptureOptions | None = None  # opts with the automatic budget fixed by the first step

    def _step_opts(self) -> CaptureOptions:
        """The automatic statistics budget reads the allocator's statistics, which costs a few hundred microseconds
        of host time on CUDA: the first step resolves it and later steps of this Capturer reuse the value."""
        return self._resolved or self.opts

    def _keep_budget(self, batcher: StatsBatcher) -> None:
        if self.opts.budget_bytes is None and self._resolved is None and batcher.budget >= 0:
            self._resolved = replace(self.opts, budget_bytes=batcher.budget)

    _lean_rec: LeanStatsRecorder | None = None
    _layout: Layout | None = None  # the last lean step's, reused by the next when it matches

    def step(self, args: tuple, kwargs: dict) -> Capture:
        if self.opts.compiled:
            return self._compiled_step(args, kwargs)
        if self.lean:
            return self._lean_step(args, kwargs)
        opts, root = self._step_opts(), self.root
        self.stack.reset()
        rec = ValueRecorder(self.stack, opts)
        tap = OpTap(rec.on_op) if (opts.ops or opts.op_sequence) else None
        hits: list[Any] = []
        if opts.backward:
            root.zero_grad(set_to_none=True)  # the CPU model may be shared by two sides: never accumulate across runs
        with warnings.catch_warnings(record=True) as caught, contextlib.ExitStack() as es:
            warnings.simplefilter("always")
            for mode in self.modes(self.stack):
                hits.append(es.enter_context(mode))
            if tap is not None:
                es.enter_context(tap)
            grad = contextlib.nullcontext() if opts.backward else torch.no_grad()
            with grad:
                out = root(*args, **kwargs)
                if opts.backward:
                    self._backward(rec, out)
        cap = self._finished(rec, caught)
        faults = [m for m in hits if hasattr(m, "hits")]
        cap.fault_hits = faults[0].hits if faults else None
        cap.fault_seen = sorted(faults[0].seen) if faults else []
        return cap


    def _lean_step(self, args: tuple, kwargs: dict) -> Capture:
        rec = self._lean_rec = LeanStatsRecorder(self._step_opts())
        gc_was = gc.isenabled()
        gc.disable()  # thousands of small tuples per step would trigger collections that scan the whole model
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with torch.no_grad():
                    self.root(*args, **kwargs)
            cap = rec.finish(_warning_lines(caught), self.synchronize, self._layout)
            self._layout = rec.layout
            self._keep_budget(rec.batcher)
            return cap
        finally:
            self._lean_rec = None
            if gc_was:
                gc.enable()


    def _compiled_step(self, args: tuple, kwargs: dict) -> Capture:
        """The step under torch.compile (`opts.compiled` is the backend; static shapes, as the profile recorder
        compiles). Only the model's inputs and outputs (the root's entries, keyed as an eager capture keys them) and,
        in training, the gradients of its outputs and of every parameter are captured: a hook or dispatch mode inside
        the model would break its graph or be traced into it, and the kernels that ran would no longer be the ones
        compiled for the user's model. Which module diverged first is therefore not located, only whether the
        compiled step's results did (and, through the parameter gradients, where in backward)."""
        opts, root = self._step_opts(), self.root
        if self.modes(self.stack):
            raise RuntimeError("a compiled capture runs without dispatch modes (float64 or fault injection)")
        if self._compiled_fn is None:
            self._compiled_fn = torch.compile(root, backend=str(opts.compiled), dynamic=False)
        self.stack.reset()
        rec = ValueRecorder(self.stack, opts)
        if opts.backward:
            root.zero_grad(set_to_none=True)
        with compiler_output(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.nullcontext() if opts.backward else torch.no_grad():
                rec.enter("", 0, args, kwargs)
                out = self._compiled_fn(*args, **kwargs)
                rec.exit("", 0, out)
                if opts.backward:
                    self._backward(rec, out)
        cap = self._finished(rec, caught)
        cap.compiled = opts.compiled
        return cap

    def _backward(self, rec: ValueRecorder, out: Any) -> None:
        if self.loss_of is None:
            raise RuntimeError("backward capture needs a loss")
        rec.in_backward = True
        self.loss_of(out).backward()

    def _finished(self, rec: ValueRecorder, caught: list[warnings.WarningMessage]) -> Capture:
        # Detach the recorder: a forward run between captured steps (hooks still attached) must record nothing.
        self.stack.on_enter = self.stack.on_exit = None
        if rec.backward:
            rec.param_grads(self.root)
        cap = rec.finish(_warning_lines(caught), self.synchronize)
        self._keep_budget(rec.batcher)
        return cap


def run_capture(root: torch.nn.Module, args: tuple, kwargs: dict, opts: CaptureOptions,
                modes: Callable[[ModuleStack], list[Any]], synchronize: Callable[[], None],
                loss_of: Callable[[Any], torch.Tensor] | None = None) -> Capture:
    """One captured step."""
    with Capturer(root, opts, modes, synchronize, loss_of) as cap:
        return cap.step(args, kwargs)


def _warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    lines: list[str] = []
    for w in caught:
        text = " ".join(str(w.message).split())[:300]
        if "determinis" in text.lower() and text not in lines:
            lines.append(text)
    return lines
