"""Capture every submodule's inputs and outputs (and optionally every aten op's outputs, and gradients) of one step.

Module boundaries come from forward pre-hooks and hooks on each submodule; ops from a dispatch mode (OpTap). A
tensor seen twice (a layer's output is the next layer's input) is stored once: entries point at blobs. In "full"
mode a blob is a host copy of the tensor; in "stats" mode its statistics are reduced on the device in batches
(stats.py) and the tensor is never copied, except for modules matching `keep` (kept in full for replay).
"""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import warnings
import weakref
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, NamedTuple

import torch
from torch.utils._python_dispatch import _disable_current_modes

from npuport.parity.modes import OpTap
from npuport.parity.stats import Stats, StatsBatcher, tensor_stats
from npuport.parity.tree import flatten, leaf_paths, to_spec
from npuport.trace.naming import op_name

ROOT = "<model>"
_SMALL = 1 << 16  # bytes: tensors this small stay deduplicated across a statistics flush (position ids, masks)


def call_key(path: str, call: int) -> str:
    return f"{path or ROOT}#{call}"


class Entry(NamedTuple):
    """One captured tensor. io: in / out (module), op (an aten op's output), grad_out (gradient of a module
    output), grad (a parameter's gradient). `order` is the execution order of the event that completed it.
    A NamedTuple because thousands are made inside a forward pass."""

    key: str
    module: str
    call: int
    io: str
    leaf: str
    shape: tuple[int, ...]
    dtype: str
    blob: int
    order: int
    op: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"key": self.key, "module": self.module, "call": self.call, "io": self.io, "leaf": self.leaf,
               "shape": list(self.shape), "dtype": self.dtype, "blob": self.blob, "order": self.order}
        if self.op:
            out["op"] = self.op
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Entry":
        return Entry(d["key"], d["module"], int(d["call"]), d["io"], d["leaf"], tuple(int(x) for x in d["shape"]),
                     d["dtype"], int(d["blob"]), int(d["order"]), d.get("op"))


@dataclass(frozen=True)
class CaptureOptions:
    mode: str = "full"  # full | stats
    ops: bool = False
    op_sequence: bool = True
    backward: bool = False
    keep: tuple[str, ...] = ()  # fnmatch patterns of module paths kept in full in stats mode
    budget_bytes: int | None = None  # stats mode: bytes queued between statistics flushes; None: from free memory
    stats_kernel: str = "auto"  # auto | triton | torch: which reducer computes stats-mode statistics (stats.py)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "ops": self.ops, "op_sequence": self.op_sequence, "backward": self.backward,
                "keep": list(self.keep), "stats_kernel": self.stats_kernel,
                "stats_budget_bytes": self.budget_bytes}


@dataclass
class Capture:
    mode: str
    entries: list[Entry]
    full: dict[int, torch.Tensor]
    stats: MutableMapping[int, Stats]  # a StatsTable from a stats capture or an artifact
    calls: dict[str, dict[str, Any]]  # call key -> {"spec": tree spec of {args, kwargs}, "blobs": [blob per tensor]}
    module_sequence: list[str]
    op_sequence: list[str] | None
    warnings: list[str] = field(default_factory=list)
    fault_hits: int | None = None
    stats_kernels: set[str] = field(default_factory=set)  # the reducers that computed `stats` (stats.py)

    def stats_of(self, blob: int) -> Stats:
        if blob not in self.stats:
            self.stats[blob] = tensor_stats(self.full[blob])
        return self.stats[blob]

    def by_key(self) -> dict[str, Entry]:
        return {e.key: e for e in self.entries}


_NO_MODES = contextlib.nullcontext()


def _modes_off() -> Any:
    """Hooks run their own torch ops outside the dispatch modes (faults, op tap); skipped when none is active."""
    return _disable_current_modes() if torch._C._len_torch_dispatch_stack() else _NO_MODES


class ModuleStack:
    """Which module call is running: pre-hook pushes (path, call index), hook pops. Read by capture and faults."""

    def __init__(self, root: torch.nn.Module) -> None:
        self.names = {m: n for n, m in root.named_modules(remove_duplicate=True)}
        self.root = root
        self.stack: list[tuple[str, int]] = []
        self.counts: dict[str, int] = {}
        self.on_enter: Callable[[str, int, tuple, dict], None] | None = None
        self.on_exit: Callable[[str, int, Any], None] | None = None

    def current(self) -> str | None:
        return self.stack[-1][0] if self.stack else None

    @contextlib.contextmanager
    def attached(self) -> Iterator["ModuleStack"]:
        handles = []
        for mod, name in self.names.items():
            handles.append(mod.register_forward_pre_hook(self._pre, with_kwargs=True))
            handles.append(mod.register_forward_hook(self._post, with_kwargs=True, always_call=True))
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    def _pre(self, mod: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        path = self.names[mod]
        call = self.counts.get(path, 0)
        self.counts[path] = call + 1
        self.stack.append((path, call))
        if self.on_enter:
            with _modes_off():
                self.on_enter(path, call, args, kwargs)

    def _post(self, mod: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        path, call = self.stack.pop() if self.stack else (self.names[mod], 0)
        if self.on_exit:
            with _modes_off():
                self.on_exit(path, call, output)


class Recorder:
    def __init__(self, stack: ModuleStack, opts: CaptureOptions) -> None:
        self.opts = opts
        self.stack = stack
        self.batcher = StatsBatcher(opts.budget_bytes, fused={"auto": None, "triton": True, "torch": False}[opts.stats_kernel])
        self.full: dict[int, torch.Tensor] = {}
        self.raw: list[tuple[Any, ...]] = []
        self.calls: dict[str, dict[str, Any]] = {}
        self.pending_inputs: dict[tuple[str, int], list[tuple[str, torch.Tensor, int]]] = {}
        self.module_sequence: list[tuple[str, int]] = []
        self._keep_cache: dict[str, bool] = {}
        self.stats_mode = opts.mode == "stats"
        self.backward = opts.backward
        self.op_sequence: list[str] = []
        self.op_counts: dict[tuple[str, str], int] = {}
        self.seen: dict[int, tuple[Any, int, int]] = {}
        self.seq = 0
        self.next_blob = 0
        self.in_backward = False
        stack.on_enter, stack.on_exit = self.enter, self.exit

    def _keep(self, path: str) -> bool:
        keep = self._keep_cache.get(path)
        if keep is None:
            keep = self.opts.mode == "full" or any(fnmatch.fnmatchcase(path, p) for p in self.opts.keep)
            self._keep_cache[path] = keep
        return keep

    def blob(self, t: torch.Tensor, full: bool) -> int:
        hit = self.seen.get(id(t))
        if hit is not None and hit[0]() is t and hit[1] == t._version:
            if full and hit[2] not in self.full:
                self.full[hit[2]] = t.detach().to("cpu", copy=True)
            return hit[2]
        blob = self.next_blob
        self.next_blob += 1
        self.seen[id(t)] = (weakref.ref(t), t._version, blob)
        if full:
            self.full[blob] = t.detach().to("cpu", copy=True)
        if self.stats_mode:
            self.batcher.add(blob, t)
        return blob

    def enter(self, path: str, call: int, args: tuple, kwargs: dict) -> None:
        full = self._keep_cache.get(path)
        if full is None:
            full = self._keep(path)
        if full:  # replayable: keep the call's structure too
            spec, tensors = to_spec({"args": args, "kwargs": kwargs})
            blobs = [self.blob(t, True) for t in tensors]
            self.calls[call_key(path, call)] = {"spec": spec, "blobs": blobs}
            self.pending_inputs[(path, call)] = [(leaf, tensors[i], blobs[i]) for leaf, i in leaf_paths(spec)]
            return
        leaves: list[tuple[str, torch.Tensor]] = []
        if len(args) == 1 and type(args[0]) is torch.Tensor:  # the common case, without the generic walk
            leaves.append((".args[0]", args[0]))
        else:
            flatten(args, ".args", leaves)
        if kwargs:
            flatten(kwargs, ".kwargs", leaves)
        blob = self.blob
        self.pending_inputs[(path, call)] = [(leaf, t, blob(t, False)) for leaf, t in leaves]

    def exit(self, path: str, call: int, output: Any) -> None:
        self.seq += 1
        seq = self.seq
        raw = self.raw
        for leaf, t, blob in self.pending_inputs.pop((path, call), ()):
            raw.append((None, path, call, "in", leaf, t.shape, t.dtype, blob, seq, None))
        full = self._keep_cache.get(path)
        if full is None:
            full = self._keep(path)
        if type(output) is torch.Tensor:
            leaves = [("", output)]
        else:
            leaves = []
            flatten(output, "", leaves)
        for leaf, t in leaves:
            raw.append((None, path, call, "out", leaf, t.shape, t.dtype, self.blob(t, full), seq, None))
            if self.backward and t.requires_grad:
                t.register_hook(self._grad_hook(path, call, leaf))
        self.module_sequence.append((path, call))

    def _grad_hook(self, path: str, call: int, leaf: str) -> Callable[[torch.Tensor], None]:
        def hook(g: torch.Tensor) -> None:
            self.seq += 1
            self.raw.append((None, path, call, "grad_out", leaf, g.shape, g.dtype, self.blob(g, self._keep(path)), self.seq, None))
        return hook

    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if self.in_backward:
            return
        name = op_name(func)
        if self.opts.op_sequence:
            self.op_sequence.append(name)
        if not self.opts.ops:
            return
        path, call = self.stack.stack[-1] if self.stack.stack else ("", 0)
        ck = call_key(path, call)
        n = self.op_counts.get((ck, name), 0)
        self.op_counts[(ck, name)] = n + 1
        self.seq += 1
        leaves: list[tuple[str, torch.Tensor]] = []
        flatten(out, "", leaves)
        full = self._keep(path)
        for leaf, t in leaves:
            self.raw.append((f"{ck}/{name}#{n}:out{leaf}", path, call, "op", leaf, t.shape, t.dtype, self.blob(t, full), self.seq, name))

    def param_grads(self, root: torch.nn.Module) -> None:
        for name, p in root.named_parameters():
            if p.grad is not None:
                self.seq += 1
                module = name.rpartition(".")[0]
                g = p.grad
                self.raw.append((f"param:{name}:grad", module, 0, "grad", "", g.shape, g.dtype, self.blob(g, self._keep(module)), self.seq, None))

    def entries(self) -> list[Entry]:
        """Built after the forward (while the device still runs it): keys and dtype names are made here."""
        names: dict[Any, str] = {}
        out = []
        for key, path, call, io, leaf, shape, dtype, blob, seq, op in self.raw:
            d = names.get(dtype)
            if d is None:
                d = names[dtype] = str(dtype).removeprefix("torch.")
            out.append(Entry(key or f"{path or ROOT}#{call}:{io}{leaf}", path, call, io, leaf, tuple(shape), d, blob, seq, op))
        return out

    def finish(self, warns: list[str], synchronize: Callable[[], None]) -> Capture:
        if self.stats_mode:
            self.batcher.flush()  # the last launches first: the device reduces while the host builds the entries
        entries = self.entries()
        mods = [call_key(p, c) for p, c in self.module_sequence]
        ops = self.op_sequence if (self.opts.op_sequence or self.opts.ops) else None
        stats = self.batcher.finish() if self.stats_mode else {}
        synchronize()
        return Capture(self.opts.mode, entries, self.full, stats, self.calls, mods, ops, warns, stats_kernels=set(self.batcher.kernels))


class LeanStatsRecorder:
    """Stats-only capture at the least host cost: one record per module call, made when the call returns (it sees
    the call's args, kwargs and output), no pre-hook, no module stack, no weak references. Used when nothing needs to
    know which module is running while it runs (no op capture or op sequence, no fault or float64 mode, no backward,
    no `keep`), which is what `--stats-only` asks by default. Why: on an H200 a plain HF forward is host-bound (the
    device is busy about 60% of it), so every microsecond spent per module call is added to the step; see
    docs/parity.md. `Capturer` calls `record` from a thin wrapper around each module's forward (`_wrap_forward`).

    Entries, keys, orders and the module sequence are the same as `Recorder`'s (tested): inputs are read when the
    call returns instead of when it starts, so an input the module changes in place is reduced after the change;
    the statistics path marks such a tensor `mutated` as it does for the full recorder.
    Deduplication holds the tensor itself (the statistics queue holds it anyway until its flush); the table is
    cleared at each flush, so memory stays bounded by the queue's budget.
    """

    def __init__(self, opts: CaptureOptions) -> None:
        self.batcher = StatsBatcher(opts.budget_bytes, fused={"auto": None, "triton": True, "torch": False}[opts.stats_kernel])
        self.counts: dict[str, int] = {}
        # One record per module call, in the order the calls return (that order is the module sequence, and a
        # record's position + 1 is its `order`): (path, call, in blob, out blob) for the common call of one tensor
        # to one tensor, else (path, call, [(io, leaf, blob), ...]).
        self.calls: list[tuple[Any, ...]] = []
        self.meta: list[tuple[Any, Any]] = []  # (shape, dtype) per blob: read once per distinct tensor
        self.seen: dict[int, tuple[torch.Tensor, int, int]] = {}

    def blob(self, t: torch.Tensor) -> int:
        hit = self.seen.get(id(t))
        version = t._version
        if hit is not None and hit[0] is t and hit[1] == version:
            return hit[2]
        meta = self.meta
        blob = len(meta)
        meta.append((t.shape, t.dtype))
        if self.batcher.add(blob, t, version):  # flushed: the queue let go of its large tensors, so does the table
            self.seen = {k: v for k, v in self.seen.items() if v[0].nbytes <= _SMALL}
        self.seen[id(t)] = (t, version, blob)
        return blob

    def record(self, path: str, args: tuple, kwargs: dict, output: Any) -> None:
        counts = self.counts
        call = counts.get(path, 0)
        counts[path] = call + 1
        blob = self.blob
        if not kwargs and len(args) == 1 and type(args[0]) is torch.Tensor and type(output) is torch.Tensor:
            self.calls.append((path, call, blob(args[0]), blob(output)))  # Linear, norms, activations, MLPs
            return
        leaves: list[tuple[str, torch.Tensor]] = []
        flatten(args, ".args", leaves)
        if kwargs:
            flatten(kwargs, ".kwargs", leaves)
        n_in = len(leaves)
        flatten(output, "", leaves)
        self.calls.append((path, call, [("in" if i < n_in else "out", leaf, blob(t)) for i, (leaf, t) in enumerate(leaves)]))

    def finish(self, warns: list[str], synchronize: Callable[[], None], layout: "Layout | None" = None) -> Capture:
        """The step's Capture. `layout` is the previous step's (same Capturer): a loop that captures every step
        usually calls the same modules with the same shapes each time, and then its entries and module sequence
        (about a microsecond per entry to build, as much as the recording itself) are reused, not rebuilt."""
        self.batcher.flush()  # the last launches first: the device reduces while the host builds the entries
        if layout is not None and layout.calls == self.calls and layout.meta == self.meta:
            entries, mods = list(layout.entries), list(layout.mods)
        else:
            entries, mods = self.entries(), [call_key(c[0], c[1]) for c in self.calls]
        self.layout = Layout(self.calls, self.meta, entries, mods)
        self.seen.clear()
        stats = self.batcher.finish()
        synchronize()
        return Capture("stats", entries, {}, stats, {}, mods, None, warns, stats_kernels=set(self.batcher.kernels))

    def entries(self) -> list[Entry]:
        names = {d: str(d).removeprefix("torch.") for d in {m[1] for m in self.meta}}
        meta = [(shape, names[dtype]) for shape, dtype in self.meta]
        # tuple.__new__ skips the NamedTuple's Python-level __new__ (once per captured tensor); shapes stay torch.Size.
        make = tuple.__new__
        out: list[Entry] = []
        add = out.append
        for seq, rec in enumerate(self.calls, 1):
            path, call = rec[0], rec[1]
            head = f"{path or ROOT}#{call}:"
            if len(rec) == 4:
                add(make(Entry, (head + "in.args[0]", path, call, "in", ".args[0]", *meta[rec[2]], rec[2], seq, None)))
                add(make(Entry, (head + "out", path, call, "out", "", *meta[rec[3]], rec[3], seq, None)))
            else:
                for io, leaf, blob in rec[2]:
                    add(make(Entry, (head + io + leaf, path, call, io, leaf, *meta[blob], blob, seq, None)))
        return out


class Layout(NamedTuple):
    """What a lean step recorded besides the statistics, kept to recognise the next step as the same (see finish)."""

    calls: list[tuple[Any, ...]]
    meta: list[tuple[Any, Any]]
    entries: list[Entry]
    mods: list[str]


def _wrap_forward(mod: torch.nn.Module, path: str, owner: "Capturer") -> Callable[[], None]:
    """Put a thin wrapper on this module instance's forward, returning the undo. Why not a forward hook: any hook
    sends every call of the module through nn.Module's slow path (hook dictionaries, kwargs plumbing), which measured
    about twice the wrapper's cost per call; a model without hooks keeps the fast path and pays one Python call.
    Modules that already carry hooks of their own (or are scripted) are left to the hook-based recorder, so their
    hooks keep running in the same order relative to the capture. Only the instance is touched, never a class or a
    torch function, and the original forward is put back on exit."""
    had = "forward" in mod.__dict__
    inner = mod.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        rec = owner._lean_rec
        if rec is not None:
            rec.record(path, args, kwargs, out)
        return out

    forward.__wrapped__ = inner  # type: ignore[attr-defined]  # inspect.signature(mod.forward) still sees the real one
    mod.forward = forward

    def undo() -> None:
        if had:
            mod.forward = inner
        else:
            mod.__dict__.pop("forward", None)
    return undo


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

    def __enter__(self) -> "Capturer":
        names = self.stack.names
        self.lean = (lean_eligible(self.opts) and not self.modes(self.stack)
                     and not any(isinstance(m, torch.jit.ScriptModule) or m._forward_hooks or m._forward_pre_hooks for m in names))
        if self.lean:
            self._attached = contextlib.ExitStack()
            for mod, path in names.items():
                self._attached.callback(_wrap_forward(mod, path, self))
        else:
            self._attached = self.stack.attached()
            self._attached.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
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
        if self.lean:
            return self._lean_step(args, kwargs)
        opts, root = self._step_opts(), self.root
        self.stack.stack, self.stack.counts = [], {}
        rec = Recorder(self.stack, opts)
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
                    if self.loss_of is None:
                        raise RuntimeError("backward capture needs a loss")
                    rec.in_backward = True
                    self.loss_of(out).backward()
        # Detach the recorder: a forward run between captured steps (hooks still attached) must record nothing.
        self.stack.on_enter = self.stack.on_exit = None
        if opts.backward:
            rec.param_grads(root)
        cap = rec.finish(_warning_lines(caught), self.synchronize)
        self._keep_budget(rec.batcher)
        faults = [m for m in hits if hasattr(m, "hits")]
        cap.fault_hits = faults[0].hits if faults else None
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
