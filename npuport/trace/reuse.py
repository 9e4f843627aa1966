"""Repeated structure recorded once: the decoder layers of a model are the same module code with the same
configuration, parameter shapes and inputs, so one of them (the template) is recorded op by op and the others run on
fake tensors without the recorder, their records copied from the template's.

- A *group* is the members of one nn.ModuleList that share a structure key (module types, parameter and buffer shapes
  and dtypes, plain attributes other than the layer's own index). Only the outermost ModuleLists form groups.
- A member's call is a *copy* when its group already has a template recorded in this trace with the same input
  signature (the shapes, dtypes and strides of its tensor arguments, its other arguments' values, grad mode); else it
  is recorded normally and becomes the template for that signature.
- While a copy's forward runs the recorder is dormant; the copy's records are the template's with the module path
  renamed and tensor ids mapped: the template's inputs, parameters and outputs to the copy's, every other tensor to a
  new id. Its autograd nodes are tagged with a ReuseTag; their backward ops are only counted, in runs between recorded
  ops, and at the end of the step the template's backward records are copied into those places.

Anything the copy cannot reproduce turns reuse off for that group: a collective inside the template (the trace of a
distributed rank is recorded in full), or a backward whose op count differs from the template's (then the copies are
placed where the copy's backward began, and a note says so). `--no-reuse` records every layer.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from npuport.trace.records import ApiFrame, OpCall, TensorMeta, Trace

META_KEY = "npuport"  # where the recorder tags autograd nodes (Node.metadata)
_META_KEY = META_KEY
# attributes that differ between otherwise identical layers and select only their own state (a KV-cache slot)
_OWN_INDEX = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number", "idx", "block_idx", "block_id"})
_PRIMITIVE = (bool, int, float, str, type(None))
_SET = object.__setattr__  # fills a frozen, slotted record made with object.__new__
_META_FIELDS = tuple(f.name for f in dataclasses.fields(TensorMeta))


@dataclass(frozen=True)
class ReuseTag:
    """Marks the autograd nodes a copy created: their backward ops are copied, not recorded."""

    serial: int


@dataclass(frozen=True)
class _Out:
    """A template's output tensor, as a skipped copy makes it."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


@dataclass
class Template:
    path: str
    start: int  # its forward records: trace.calls[start:end]
    end: int
    frames: tuple[int, ...]  # ApiFrame ids created inside it
    inputs: tuple[int, ...]  # tensor ids of its flattened (args, kwargs) tensors, in order
    params: dict[str, int]  # relative name -> tensor id of its parameters and buffers
    outputs: tuple[int, ...]
    usable: bool = True
    # in inference a copy need not run at all: its outputs are made empty to the template's measure and its memory
    # replayed from the template's (the rise above its entry while it ran, and at which module; what it kept besides
    # its outputs: a cache's new entries)
    skip: tuple | None = None  # (output treespec, leaves: an _Out per tensor, else the plain value)
    rise: int = 0
    rise_module: str = ""
    kept: int = 0
    # training: which inputs its graph keeps for backward, the gradients of its outputs and inputs as they ran
    # (position -> (id, _Out)), what its submodules' forwards left alive, the rise of its own backward above the
    # live bytes when it began (its skipped copies' backward highs, settled at finish)
    train: bool = False
    saves: tuple[bool, ...] = ()
    grad_out: dict[int, tuple[int, _Out]] = field(default_factory=dict)
    grad_in: dict[int, tuple[int, _Out]] = field(default_factory=dict)
    saved_by: dict[str, int] = field(default_factory=dict)
    rise_backward: int | None = None
    backward_span: list[int] | None = None
    accumulations: set[int] = field(default_factory=set)  # indices of its weights' AccumulateGrad calls


@dataclass
class _Run:
    position: int  # recorded calls before it
    order: int  # creation order: runs at one position keep the order they ran in
    # per op: the ids of its input and output tensors as they ran (the gradients that flow in and out of the copy
    # are tensors the recorder numbers, so the copied calls connect to the calls around them)
    ops: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)


@dataclass
class _Copy:
    template: Template
    path: str
    ids: dict[int, int]
    frames: dict[int, int]
    runs: list[_Run] = field(default_factory=list)
    skipped: bool = False  # did not run: its backward is one replayed node (_Replay), its calls copied whole
    kept: int = 0  # bytes its forward would have kept for backward (replayed, freed by its backward)
    # the replayed node's gradients, by position: of its outputs (received) and of its inputs (made); mapped to the
    # template's at finish (its gradients are seen when its backward runs, after every copy's)
    grads_out: dict[int, int] = field(default_factory=dict)
    grads_in: dict[int, int] = field(default_factory=dict)


@dataclass
class _Pending:
    template: Template | None
    key: tuple
    signature: tuple
    module: torch.nn.Module | None = None
    skip: bool = False  # a copy in inference: its forward is not run (LayerReuse._forward)
    watch: list | None = None  # the memory tracker's watch over a template that may be skipped later
    live: int = 0
    grad_in: dict[int, tuple[int, _Out]] = field(default_factory=dict)
    start: int = 0
    frames_start: int = 0
    collectives_start: int = 0
    inputs: tuple[int, ...] = ()
    params: dict[str, int] = field(default_factory=dict)
    tensors: list[torch.Tensor] | None = None


def _plain_value(value: Any) -> Any:
    if isinstance(value, _PRIMITIVE):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(v, _PRIMITIVE) for v in value):
        return tuple(value)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    return type(value).__qualname__


def structure_key(module: torch.nn.Module) -> tuple:
    """What makes two layers the same code on the same configuration: every submodule's type and plain attributes
    (its own index excepted), every parameter's and buffer's name, shape, dtype and requires_grad."""
    parts: list[Any] = []
    for name, sub in module.named_modules():
        attrs = tuple(sorted((k, _plain_value(v)) for k, v in vars(sub).items()
                             if not k.startswith("_") and k not in _OWN_INDEX and k != "training"))
        parts.append((name, type(sub).__module__, type(sub).__qualname__, attrs))
    for name, p in module.named_parameters():
        parts.append((name, tuple(p.shape), str(p.dtype), p.requires_grad))
    for name, b in module.named_buffers():
        parts.append((name, tuple(b.shape), str(b.dtype)))
    return tuple(parts)


def groups_of(root: torch.nn.Module) -> dict[torch.nn.Module, tuple]:
    """member -> group key, for the children of the outermost ModuleLists that share a structure with another child.
    Kept on the root for as long as its modules and its parameters' shapes and dtypes stay what they were (every scenario of an
    audit asks again; 80 structure keys of Llama-2-70B cost 26 ms)."""
    stamp = (tuple(id(m) for m in root.modules()),
             tuple((tuple(p.shape), p.dtype, p.requires_grad) for p in root.parameters()))
    kept = root.__dict__.get("_npuport_groups")
    if kept is not None and kept[0] == stamp:
        return dict(kept[1])
    out = _groups_of(root)
    root.__dict__["_npuport_groups"] = (stamp, out)
    return dict(out)


def _groups_of(root: torch.nn.Module) -> dict[torch.nn.Module, tuple]:
    out: dict[torch.nn.Module, tuple] = {}
    inside: set[str] = set()
    for path, mod in root.named_modules():
        if not isinstance(mod, torch.nn.ModuleList) or any(path.startswith(p + ".") for p in inside):
            continue
        keys = {child: (path, structure_key(child)) for child in mod}
        counts: dict[tuple, int] = {}
        for key in keys.values():
            counts[key] = counts.get(key, 0) + 1
        members = {child: key for child, key in keys.items() if counts[key] > 1}
        if members:
            out.update(members)
            inside.add(path)
    return out


def _signature(args: tuple, kwargs: dict) -> tuple[tuple, list[torch.Tensor]]:
    leaves = tree_flatten((list(args), dict(kwargs)))[0]
    sig: list[Any] = [torch.is_grad_enabled()]
    tensors = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            tensors.append(leaf)
            sig.append((tuple(leaf.shape), leaf.dtype, tuple(leaf.stride()) if leaf.layout == torch.strided else None,
                        leaf.requires_grad))
        else:
            sig.append(_plain_value(leaf))
    return tuple(sig), tensors


class LayerReuse:
    """Hooks on the members of the model's repeated-layer groups; the Recorder consults `dormant` and `tag` and calls
    `skip_backward` for the ops of a copy's autograd nodes and `finish` when the step is over."""

    def __init__(self, root: torch.nn.Module, ctx: Any, trace: Trace, names: dict[torch.nn.Module, str]) -> None:
        self.ctx, self.trace, self.names = ctx, trace, names
        self.groups = groups_of(root)
        self.templates: dict[tuple, Template] = {}
        self.copies: dict[int, _Copy] = {}
        self.unusable: set[tuple] = set()
        self.notes: list[str] = []
        self._pending: list[_Pending] = []
        self._handles: list[Any] = []
        self._order = itertools.count()
        self.copied = 0  # layer calls taken from a template
        self.pairs: list[tuple[OpCall, OpCall]] = []  # (copied call, its template call)
        self.skipped = 0  # of those, calls that did not run (inference)
        self.memory: Any = None  # the MemoryTracker of the step, when there is one (it sets itself here)
        self._forwards: list[tuple[torch.nn.Module, Any]] = []
        # a skipped copy's backward high (live bytes when it began + its template's measured rise), settled when the
        # template's own backward (the group's last) has run
        self._deferred: list[tuple[int, Template]] = []
        # weights by id(): a skipped copy's (their AccumulateGrad ops are in the copied calls, not recorded again)
        # and a training template's (their AccumulateGrad calls are part of what is copied)
        self._skipped_weights: set[int] = set()
        self._template_weights: dict[int, Template] = {}
        self._names: dict[tuple[str, str, str], str] = {}

    # -- hooks -----------------------------------------------------------------------------------------------------
    def __enter__(self) -> LayerReuse:
        for mod in self.groups:
            self._handles.append(mod.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(mod.register_forward_hook(self._post, with_kwargs=True, always_call=True))
            # the module's forward as an instance attribute, so a skipped copy returns without running it
            self._forwards.append((mod, mod.__dict__.get("forward")))
            mod.forward = self._forward(mod, mod.forward)
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        for mod, own in self._forwards:
            if own is None:
                mod.__dict__.pop("forward", None)
            else:
                mod.forward = own
        self._forwards = []

    def _forward(self, mod: torch.nn.Module, original: Any) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            pend = self._pending[-1] if self._pending else None
            if pend is not None and pend.skip and pend.module is mod and pend.template is not None:
                return self._stand_in(pend.template)
            return original(*args, **kwargs)

        return forward

    def _stand_in(self, tpl: Template) -> Any:
        """The outputs of a copy that does not run: empty tensors of the template's outputs' shapes, strides and
        dtypes (the allocations its outputs are), after replaying its transient memory and what it keeps. In
        training they come out of one autograd node (_Replay) whose backward replays the template's."""
        assert tpl.skip is not None
        spec, leaves = tpl.skip
        pend = self._pending[-1]
        mod = pend.module
        path = self.names.get(mod, "") if mod is not None else ""
        if self.memory is not None:
            self.memory.replay(tpl.rise, _rename(tpl.rise_module, tpl.path, path), tpl.kept)
            for rel, n in tpl.saved_by.items():
                self.memory.add_saved(path + rel, n)
        self.skipped += 1
        outs = [x for x in leaves if isinstance(x, _Out)]
        if tpl.train:
            tensors = pend.tensors or []
            params = [(n, t) for n, t in _state(mod) if t.requires_grad] if mod is not None else []
            self._skipped_weights.update(id(t) for _, t in params)
            flows = [t for t in tensors if t.requires_grad]
            saved = [t for t, keep in zip(tensors, tpl.saves) if keep]
            serial = self.ctx.reuse_tag.serial if self.ctx.reuse_tag is not None else len(self.copies)
            made_t = _Replay.apply(self, serial, outs, flows, [n for n, _ in params], saved, *flows,
                                   *(t for _, t in params))
            node = next((t.grad_fn for t in made_t if t.grad_fn is not None), None)
            if node is not None:
                node.metadata[_META_KEY] = ReuseTag(serial)  # type: ignore[attr-defined]  # a property
            it = iter(made_t)
        else:
            it = iter([torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device=x.device) for x in outs])
        return tree_unflatten([next(it) if isinstance(x, _Out) else x for x in leaves], spec)

    def _replay_backward(self, serial: int, grads: tuple, flows: list[_Out], params: list[tuple[str, _Out]]) -> tuple:
        """A skipped copy's backward: the gradients of its inputs and weights as empty tensors, its memory replayed
        (the rise its group's measured backward had, the bytes its forward kept freed), its calls placed here."""
        copy = self.copies[serial]
        tpl = copy.template
        copy.runs.append(_Run(len(self.trace.calls), next(self._order)))
        if self.memory is not None:
            self._deferred.append((self.memory.live, tpl))
            self.memory.replay(0, "", -copy.kept, phase="backward")
        tid = self.ctx.tid
        differentiable = [g for g in grads]
        for pos, g in enumerate(differentiable):
            if isinstance(g, torch.Tensor):
                copy.grads_out[pos] = tid(g)
        out: list[torch.Tensor | None] = []
        for pos, meta in enumerate(flows):
            # shaped as the input (the template's gradient, seen later, has its shape; a contiguous layout)
            g = torch.empty(meta.shape, dtype=meta.dtype, device=meta.device)
            copy.grads_in[pos] = tid(g)
            out.append(g)
        for _, meta in params:
            out.append(torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=meta.device))
        return tuple(out)

    def accumulating(self, node: Any) -> bool:
        """An op of an AccumulateGrad node (a weight's gradient stored): True for a skipped copy's weight (its calls
        come with the template's copied ones); a template's weight marks the call it is about to record."""
        var = getattr(node, "variable", None)
        if var is None:
            return False
        if id(var) in self._skipped_weights:
            return True
        tpl = self._template_weights.get(id(var))
        if tpl is not None:
            tpl.accumulations.add(len(self.trace.calls))
        return False

    def _pre(self, mod: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ctx = self.ctx
        if ctx.dormant:  # inside a copy: nothing below it is recorded or hooked
            self._pending.append(_Pending(None, (), ()))
            return
        signature, tensors = _signature(args, kwargs)
        key = (self.groups[mod], signature)
        template = self.templates.get(key)
        if template is not None and template.usable and key not in self.unusable:
            ctx.dormant = True
            ctx.reuse_tag = ReuseTag(len(self.copies))
            self._pending.append(_Pending(template, key, signature, mod, skip=template.skip is not None,
                                          tensors=tensors))
            return
        pend = _Pending(None, key, signature, mod, start=len(self.trace.calls), frames_start=len(self.trace.frames),
                        collectives_start=len(self.trace.collectives))
        if key not in self.templates and key not in self.unusable:
            pend.inputs = tuple(ctx.tid(t) for t in tensors)
            pend.params = {n: ctx.tid(t) for n, t in _state(mod)}
            # its copies may be skipped, their memory replayed from what it did
            pend.tensors = tensors
            if self.memory is not None:
                pend.watch, pend.live = self.memory.watch(), self.memory.live
            if torch.is_grad_enabled():  # the gradients of its inputs as they come: a skipped copy's are made alike
                for pos, t in enumerate(x for x in tensors if x.requires_grad):
                    t.register_hook(functools.partial(self._grad_seen, pend.grad_in, pos))
        self._pending.append(pend)

    def _grad_seen(self, into: dict[int, tuple[int, _Out]], pos: int, grad: torch.Tensor) -> None:
        if isinstance(grad, torch.Tensor) and pos not in into:
            into[pos] = (self.ctx.tid(grad), _Out(tuple(grad.shape), tuple(grad.stride()), grad.dtype, grad.device))

    def _post(self, mod: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        pend = self._pending.pop() if self._pending else None
        if pend is None or not pend.key:  # nested inside a copy, or hooks entered mid-call
            return
        leaves, spec = tree_flatten(output)
        outs = [t for t in leaves if isinstance(t, torch.Tensor)]
        if pend.template is not None:
            self.ctx.dormant, self.ctx.reuse_tag = False, None
            self._copy_forward(mod, pend, outs)
            return
        watch = pend.watch
        if watch is not None:
            self.memory.unwatch(watch)
        if pend.key in self.templates or pend.key in self.unusable or not pend.params and not pend.inputs:
            return
        if len(self.trace.collectives) > pend.collectives_start:  # a rank's collectives are recorded in full
            self.unusable.add(pend.key)
            return
        tpl = Template(path=self.names.get(mod, ""), start=pend.start, end=len(self.trace.calls),
                       frames=tuple(i for i in self.trace.frames if i >= pend.frames_start), inputs=pend.inputs,
                       params=pend.params, outputs=tuple(self.ctx.tid(t) for t in outs))
        if pend.tensors is not None:
            self._skip_profile(tpl, mod, pend, leaves, spec, outs)
        self.templates[pend.key] = tpl

    def _skip_profile(self, tpl: Template, mod: torch.nn.Module, pend: _Pending, leaves: list, spec: Any,
                      outs: list[torch.Tensor]) -> None:
        """Whether copies of this inference template may skip running, and what to replay for them: only when its
        outputs are new tensors (no input or weight returned or viewed) and its other results plain values."""
        if any(not isinstance(x, (torch.Tensor, *_PRIMITIVE)) for x in leaves):
            return  # a cache object or another stateful result: copies run (dormant)
        train = torch.is_grad_enabled()
        if any(t.layout != torch.strided or t.requires_grad and not train for t in outs):
            return
        tensors = pend.tensors or []
        known = {_storage(t) for t in itertools.chain(tensors, (t for _, t in _state(mod)))}
        stores = [_storage(t) for t in outs]
        if any(st in known for st in stores) or len(set(stores)) != len(stores):
            return
        if pend.watch is not None:
            high, module = pend.watch
            tpl.rise, tpl.rise_module = high - pend.live, module
            tpl.kept = self.memory.live - pend.live - sum(t.untyped_storage().nbytes() for t in outs)
            if train:  # what its submodules' forwards left alive (the memory tracker's saved_by_module)
                tpl.saved_by = self.memory.saved_under(tpl.path)
        if train:
            if any(not t.requires_grad and t.is_floating_point() for t in outs):
                return
            tpl.train = True
            self._template_weights.update((id(t), tpl) for _, t in _state(mod) if t.requires_grad)
            dormant, self.ctx.dormant = self.ctx.dormant, True  # reading saved tensors dispatches a detach
            try:
                saved = _saved_storages(outs, tpl.path)
            finally:
                self.ctx.dormant = dormant
            tpl.saves = tuple(_storage(t) in saved for t in tensors)
            tpl.grad_in = pend.grad_in
            for pos, t in enumerate(x for x in outs if x.requires_grad):
                t.register_hook(functools.partial(self._grad_seen, tpl.grad_out, pos))
        tpl.skip = (spec, [_Out(tuple(x.shape), tuple(x.stride()), x.dtype, x.device) if isinstance(x, torch.Tensor)
                           else x for x in leaves])

    # -- forward copies ----------------------------------------------------------------------------------------------
    def _copy_forward(self, mod: torch.nn.Module, pend: _Pending, outs: list[torch.Tensor]) -> None:
        ctx, trace = self.ctx, self.trace
        tpl = pend.template
        assert tpl is not None
        ids: dict[int, int] = {}
        for tid, t in zip(tpl.inputs, pend.tensors or ()):
            ids.setdefault(tid, ctx.tid(t))
        state = dict(_state(mod))
        for name, tid in tpl.params.items():
            if name in state:
                ids.setdefault(tid, ctx.tid(state[name]))
        for tid, t in zip(tpl.outputs, outs):
            if tid in ids:
                continue
            ids[tid] = ctx.tid(t)
            base = ctx.view_bases.get(tid)
            if base is not None:
                ctx.view_bases[ids[tid]] = self._id(ids, base)
        path = self.names.get(mod, "")
        frames = {old: self._copy_frame(trace.frames[old], ids, tpl.path, path) for old in tpl.frames}
        for call in trace.calls[tpl.start:tpl.end]:
            trace.calls.append(self._copy_call(call, ids, frames, tpl.path, path, len(trace.calls)))
        self.copies[len(self.copies)] = _Copy(tpl, path, ids, frames, skipped=pend.skip, kept=tpl.kept)
        self.copied += 1

    def _id(self, ids: dict[int, int], tid: int) -> int:
        got = ids.get(tid)
        if got is None:
            got = ids[tid] = self.ctx.next_id
            self.ctx.next_id += 1
        return got

    def _meta(self, m: TensorMeta, ids: dict[int, int]) -> TensorMeta:
        # one per tensor of every copied call (77,000 for Llama-2-70B's default scenarios): the template's fields taken
        # over as they are, the two ids mapped; not through the frozen dataclass's __init__ (a guarded setattr per field)
        made = object.__new__(TensorMeta)
        put = _SET
        for name in _META_FIELDS:
            put(made, name, getattr(m, name))
        put(made, "id", self._id(ids, m.id))
        if m.base is not None:
            put(made, "base", self._id(ids, m.base))
        return made

    def _copy_call(self, call: OpCall, ids: dict[int, int], frames: dict[int, int], old: str, new: str,
                   index: int) -> OpCall:
        made = OpCall(index, call.op, call.kind, call.phase, tuple(self._meta(m, ids) for m in call.inputs),
                      tuple(self._meta(m, ids) for m in call.outputs), call.args, call.kwargs,
                      self._renamed(call.module, old, new), call.module_type, call.source, call.api,
                      frames.get(call.frame, call.frame) if call.frame is not None else None, call.mutated)
        self.pairs.append((made, call))  # indices settle at finish(): Trace.copy_of is made from these there
        return made

    def _renamed(self, module: str, old: str, new: str) -> str:
        """`_rename`, one string per (module, copy) shared by all its calls: a copied layer's calls would otherwise
        each hold a string of their own."""
        key = (module, old, new)
        got = self._names.get(key)
        if got is None:
            got = self._names[key] = _rename(module, old, new)
        return got

    def _copy_frame(self, frame: ApiFrame, ids: dict[int, int], old: str, new: str) -> int:
        fid = len(self.trace.frames)
        self.trace.frame_copy_of[fid] = self.trace.frame_copy_of.get(frame.id, frame.id)
        self.trace.frames[fid] = replace(frame, id=fid, inputs=tuple(self._meta(m, ids) for m in frame.inputs),
                                         outputs=tuple(self._meta(m, ids) for m in frame.outputs),
                                         module=_rename(frame.module, old, new))
        return fid

    # -- backward copies ---------------------------------------------------------------------------------------------
    def skip_backward(self, tag: ReuseTag, args: tuple, kwargs: dict, out: Any) -> None:
        """One backward op of a copy's autograd node: its tensors' ids noted in the current run, its call copied from
        the template's at finish()."""
        copy = self.copies.get(tag.serial)
        if copy is None or copy.skipped:  # the replayed node's own allocations: placed by _replay_backward
            return
        runs = copy.runs
        position = len(self.trace.calls)
        if not runs or runs[-1].position != position:
            runs.append(_Run(position, next(self._order)))
        tid = self.ctx.tid
        ins = tuple(tid(t) for t in _tensor_args(args, kwargs))
        outs = tuple(tid(t) for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor))
        runs[-1].ops.append((ins, outs))

    def recorded_backward(self, module: str) -> None:
        """A recorded backward op of `module`: a training template's own backward is measured (live bytes before its
        first op, the highest while its ops run) for the rise of its skipped copies' backward."""
        if self.memory is None:
            return
        for tpl in self.templates.values():
            if tpl.train and _under(module, tpl.path):
                if tpl.backward_span is None:
                    tpl.backward_span = [self.memory.before, self.memory.live]
                tpl.backward_span[1] = max(tpl.backward_span[1], self.memory.live)
                tpl.rise_backward = tpl.backward_span[1] - tpl.backward_span[0]
                return

    def finish(self) -> None:
        """Put each copy's backward records where its backward ran, then number every call in order."""
        trace = self.trace
        if self.memory is not None:  # the skipped copies' backward highs, now that their templates' rise is known
            result = self.memory.result
            for live, tpl in self._deferred:
                high = live + (tpl.rise_backward or 0)
                if high > result.peak:
                    result.peak, result.peak_module, result.peak_phase = high, "", "backward"
        inserts: list[tuple[int, int, list[OpCall]]] = []
        backward_of: dict[tuple[str, bool], list[OpCall]] = {}
        for copy in self.copies.values():
            if not copy.runs:
                continue
            tpl = copy.template
            key = (tpl.path, copy.skipped)
            if key not in backward_of:
                # a skipped copy's calls include its weights' AccumulateGrad calls, interleaved as the template's ran
                backward_of[key] = [c for c in trace.calls if c.phase == "backward" and (
                    _under(c.module, tpl.path) or copy.skipped and c.index in tpl.accumulations)]
            source = backward_of[key]
            ran = [op for r in copy.runs for op in r.ops]
            if copy.skipped:
                ids = dict(copy.ids)
                for pos, real in copy.grads_out.items():
                    if pos in tpl.grad_out:
                        ids[tpl.grad_out[pos][0]] = real
                for pos, real in copy.grads_in.items():
                    if pos in tpl.grad_in:
                        ids[tpl.grad_in[pos][0]] = real
                copied = [self._copy_call(c, ids, copy.frames, tpl.path, copy.path, 0) for c in source]
                inserts.append((copy.runs[0].position, copy.runs[0].order, copied))
                continue
            if len(ran) == len(source):
                copied = self._copy_backward(source, ran, copy)
            else:
                copied = [self._copy_call(c, copy.ids, copy.frames, tpl.path, copy.path, 0) for c in source]
            sizes = [len(r.ops) for r in copy.runs]
            if sum(sizes) != len(copied):  # the copy's backward ran other ops than the template's: keep them together
                self.notes.append(f"{copy.path}: its backward ran {sum(sizes)} ops where {tpl.path}'s recorded "
                                  f"{len(copied)}; its records are the template's, placed where its backward began")
                sizes = [len(copied)] + [0] * (len(sizes) - 1)
            at = 0
            for run, size in zip(copy.runs, sizes):
                inserts.append((run.position, run.order, copied[at:at + size]))
                at += size
        if inserts:
            inserts.sort(key=lambda x: (x[0], x[1]))
            calls: list[OpCall] = []
            it = iter(inserts)
            nxt = next(it, None)
            for pos, call in enumerate(trace.calls):
                while nxt is not None and nxt[0] == pos:
                    calls.extend(nxt[2])
                    nxt = next(it, None)
                calls.append(call)
            while nxt is not None:
                calls.extend(nxt[2])
                nxt = next(it, None)
            trace.calls[:] = calls
        for i, call in enumerate(trace.calls):
            call.index = i
        trace.copy_of.update((made.index, tpl.index) for made, tpl in self.pairs)
        if self.copied:
            trace.reused, trace.skipped = self.copied, self.skipped


    def _copy_backward(self, source: list[OpCall], ran: list[tuple[tuple[int, ...], tuple[int, ...]]],
                       copy: _Copy) -> list[OpCall]:
        """The template's backward calls with the ids the copy's ops really had (op i of the copy ran as call i of
        the template: same code, same order) for the tensors its backward made or received; forward tensors, and a
        tensor the ops did not show (a view's base), map as in forward."""
        ids = dict(copy.ids)
        for call, (ins, outs) in zip(source, ran):
            if len(ins) == len(call.inputs) and len(outs) == len(call.outputs):
                for m, real in zip(call.inputs + call.outputs, ins + outs):
                    # a forward tensor (saved activation, parameter) keeps the id its copied forward call gave it; the
                    # copy's own forward tensors were never numbered as they ran
                    if m.id not in copy.ids:
                        ids[m.id] = real
        tpl = copy.template
        return [self._copy_call(c, ids, copy.frames, tpl.path, copy.path, 0) for c in source]


def _tensor_args(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The distinct tensors of an op's arguments in the order the recorder lists a call's inputs."""
    seen: dict[int, torch.Tensor] = {}
    for a in itertools.chain(args, kwargs.values()):
        if isinstance(a, torch.Tensor):
            seen.setdefault(id(a), a)
        elif isinstance(a, (list, tuple)):
            for x in tree_flatten(a)[0]:
                if isinstance(x, torch.Tensor):
                    seen.setdefault(id(x), x)
    return list(seen.values())


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _saved_storages(outs: list[torch.Tensor], path: str) -> set[int]:
    """The storages the autograd nodes a template created keep for backward (its inputs among them, or not)."""
    found: set[int] = set()
    todo: list[Any] = [t.grad_fn for t in outs if t.grad_fn is not None]
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        tag = node.metadata.get(_META_KEY)  # type: ignore[attr-defined]  # a property, typed as a method
        if not (isinstance(tag, tuple) and tag and isinstance(tag[0], str) and _under(tag[0], path)):
            continue  # made outside the template: its graph ends here
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except Exception:  # noqa: BLE001 - a saved value freed or not readable: nothing kept
                continue
            for v in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(v, torch.Tensor) and v.layout == torch.strided:
                    found.add(_storage(v))
        todo.extend(nxt for nxt, _ in node.next_functions)
    return found


class _Replay(torch.autograd.Function):
    """A skipped copy as one autograd node: forward makes its outputs, backward the gradients of its inputs and
    weights (LayerReuse._replay_backward); it keeps what the template's graph kept of its inputs."""

    @staticmethod
    def forward(ctx: Any, reuse: LayerReuse, serial: int, outs: list[_Out], flows: list[torch.Tensor],
                params: list[str], saved: list[torch.Tensor], *tensors: torch.Tensor) -> Any:
        ctx.reuse, ctx.serial = reuse, serial
        ctx.flows = [_Out(tuple(t.shape), tuple(t.stride()), t.dtype, t.device) for t in flows]
        ctx.params = [(n, _Out(tuple(t.shape), tuple(t.stride()), t.dtype, t.device))
                      for n, t in zip(params, tensors[len(flows):])]
        ctx.save_for_backward(*saved)
        made = tuple(torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device=x.device) for x in outs)
        ctx.mark_non_differentiable(*(t for t in made if not t.is_floating_point()))
        return made

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return (None, None, None, None, None, None, *ctx.reuse._replay_backward(ctx.serial, grads, ctx.flows,
                                                                                ctx.params))


def _state(mod: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return list(mod.named_parameters()) + list(mod.named_buffers())


def _under(module: str, path: str) -> bool:
    return module == path or module.startswith(path + ".")


def _rename(module: str, old: str, new: str) -> str:
    if module == old:
        return new
    if old and module.startswith(old + "."):
        return new + module[len(old):]
    return module


# shared with npuport.model.hf.prefill_once (the decode cache's prefill with identical layers run once)
OWN_INDEX = _OWN_INDEX
PRIMITIVE = _PRIMITIVE
call_signature = _signature
storage_of = _storage
OutShape = _Out  # a template's output tensor as a copy makes it
