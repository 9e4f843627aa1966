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

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from npuport.trace.records import ApiFrame, OpCall, TensorMeta, Trace

# attributes that differ between otherwise identical layers and select only their own state (a KV-cache slot)
_OWN_INDEX = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number", "idx", "block_idx", "block_id"})
_PRIMITIVE = (bool, int, float, str, type(None))


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


@dataclass
class _Pending:
    template: Template | None
    key: tuple
    signature: tuple
    module: torch.nn.Module | None = None
    skip: bool = False  # a copy in inference: its forward is not run (LayerReuse._forward)
    watch: list | None = None  # the memory tracker's watch over a template that may be skipped later
    live: int = 0
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
    """member -> group key, for the children of the outermost ModuleLists that share a structure with another child."""
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
        self.skipped = 0  # of those, calls that did not run (inference)
        self.memory: Any = None  # the MemoryTracker of the step, when there is one (it sets itself here)
        self._forwards: list[tuple[torch.nn.Module, Any]] = []

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
        dtypes (the allocations its outputs are), after replaying its transient memory and what it keeps."""
        assert tpl.skip is not None
        spec, leaves = tpl.skip
        if self.memory is not None:
            mod = self._pending[-1].module if self._pending else None
            path = self.names.get(mod, "") if mod is not None else ""
            self.memory.replay(tpl.rise, _rename(tpl.rise_module, tpl.path, path), tpl.kept)
        made = [torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device=x.device) if isinstance(x, _Out) else x
                for x in leaves]
        self.skipped += 1
        return tree_unflatten(made, spec)

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
            if not torch.is_grad_enabled():  # inference: its copies can be skipped, their memory replayed from it
                pend.tensors = tensors
                if self.memory is not None:
                    pend.watch, pend.live = self.memory.watch(), self.memory.live
        self._pending.append(pend)

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
        if not torch.is_grad_enabled() and pend.tensors is not None:
            self._skip_profile(tpl, mod, pend, leaves, spec, outs)
        self.templates[pend.key] = tpl

    def _skip_profile(self, tpl: Template, mod: torch.nn.Module, pend: _Pending, leaves: list, spec: Any,
                      outs: list[torch.Tensor]) -> None:
        """Whether copies of this inference template may skip running, and what to replay for them: only when its
        outputs are new tensors (no input or weight returned or viewed) and its other results plain values."""
        if any(not isinstance(x, (torch.Tensor, *_PRIMITIVE)) for x in leaves):
            return  # a cache object or another stateful result: copies run (dormant)
        if any(t.requires_grad or t.layout != torch.strided for t in outs):
            return
        known = {_storage(t) for t in itertools.chain(pend.tensors or (), (t for _, t in _state(mod)))}
        stores = [_storage(t) for t in outs]
        if any(st in known for st in stores) or len(set(stores)) != len(stores):
            return
        if pend.watch is not None:
            high, module = pend.watch
            tpl.rise, tpl.rise_module = high - pend.live, module
            tpl.kept = self.memory.live - pend.live - sum(t.untyped_storage().nbytes() for t in outs)
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
        self.copies[len(self.copies)] = _Copy(tpl, path, ids, frames)
        self.copied += 1

    def _id(self, ids: dict[int, int], tid: int) -> int:
        got = ids.get(tid)
        if got is None:
            got = ids[tid] = self.ctx.next_id
            self.ctx.next_id += 1
        return got

    def _meta(self, m: TensorMeta, ids: dict[int, int]) -> TensorMeta:
        # built directly, not with dataclasses.replace: one per tensor of every copied call
        return TensorMeta(self._id(ids, m.id), m.shape, m.dtype, m.stride,
                          self._id(ids, m.base) if m.base is not None else None, m.storage_offset)

    def _copy_call(self, call: OpCall, ids: dict[int, int], frames: dict[int, int], old: str, new: str,
                   index: int) -> OpCall:
        return OpCall(index, call.op, call.kind, call.phase, tuple(self._meta(m, ids) for m in call.inputs),
                      tuple(self._meta(m, ids) for m in call.outputs), call.args, call.kwargs,
                      _rename(call.module, old, new), call.module_type, call.source, call.api,
                      frames.get(call.frame, call.frame) if call.frame is not None else None, call.mutated)

    def _copy_frame(self, frame: ApiFrame, ids: dict[int, int], old: str, new: str) -> int:
        fid = len(self.trace.frames)
        self.trace.frames[fid] = replace(frame, id=fid, inputs=tuple(self._meta(m, ids) for m in frame.inputs),
                                         outputs=tuple(self._meta(m, ids) for m in frame.outputs),
                                         module=_rename(frame.module, old, new))
        return fid

    # -- backward copies ---------------------------------------------------------------------------------------------
    def skip_backward(self, tag: ReuseTag, args: tuple, kwargs: dict, out: Any) -> None:
        """One backward op of a copy's autograd node: its tensors' ids noted in the current run, its call copied from
        the template's at finish()."""
        runs = self.copies[tag.serial].runs
        position = len(self.trace.calls)
        if not runs or runs[-1].position != position:
            runs.append(_Run(position, next(self._order)))
        tid = self.ctx.tid
        ins = tuple(tid(t) for t in _tensor_args(args, kwargs))
        outs = tuple(tid(t) for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor))
        runs[-1].ops.append((ins, outs))

    def finish(self) -> None:
        """Put each copy's backward records where its backward ran, then number every call in order."""
        trace = self.trace
        inserts: list[tuple[int, int, list[OpCall]]] = []
        backward_of: dict[str, list[OpCall]] = {}
        for copy in self.copies.values():
            if not copy.runs:
                continue
            tpl = copy.template
            if tpl.path not in backward_of:
                backward_of[tpl.path] = [c for c in trace.calls if c.phase == "backward" and _under(c.module, tpl.path)]
            source = backward_of[tpl.path]
            ran = [op for r in copy.runs for op in r.ops]
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
