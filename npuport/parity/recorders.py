"""The value recorders of a parity capture: `ValueRecorder` keeps every module boundary (and op output, gradient)
as a host copy or statistics; `LeanStatsRecorder` keeps only statistics of module outputs, for large models."""

from __future__ import annotations

import fnmatch
import weakref
from typing import Any, Callable, NamedTuple

import torch

from npuport.parity.entries import ROOT, Capture, CaptureOptions, Entry, call_key
from npuport.parity.shards import local
from npuport.parity.stats import StatsBatcher
from npuport.parity.tree import call_leaves, flatten, leaf_paths, to_spec
from npuport.trace.modules import ModuleStack
from npuport.trace.naming import op_name

_SMALL = 1 << 16  # bytes: tensors this small stay deduplicated across a statistics flush (position ids, masks)
_Tensor = torch.Tensor  # read once per module call: a module global, not torch's attribute

class Layout(NamedTuple):
    """What a lean step recorded besides the statistics, kept to recognise the next step as the same (see finish)."""

    calls: list[tuple[Any, ...]]
    meta: list[tuple[Any, Any]]
    entries: list[Entry]
    mods: list[str]

class ValueRecorder:
    """Records tensor values (or their statistics) at each module boundary and op output of one step, on the
    device the step runs on: the parity counterpart of the audit's trace.Recorder, which records op metadata."""

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
        self.dist: dict[int, dict[str, Any]] = {}  # blob -> placement, for sharded tensors (DTensor)
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
                self.full[hit[2]] = self._local(t, hit[2]).detach().to("cpu", copy=True)
            return hit[2]
        blob = self.next_blob
        self.next_blob += 1
        self.seen[id(t)] = (weakref.ref(t), t._version, blob)
        if type(t) is not torch.Tensor:
            t = self._local(t, blob)
        if full:
            self.full[blob] = t.detach().to("cpu", copy=True)
        if self.stats_mode:
            self.batcher.add(blob, t)
        return blob

    def _local(self, t: torch.Tensor, blob: int) -> torch.Tensor:
        """A DTensor's local shard, its placement kept per blob (shards.py); any other tensor as it is."""
        shard, meta = local(t)
        if meta is not None:
            self.dist[blob] = meta
        return shard

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
        def hook(g: torch.Tensor | None) -> None:
            if g is None:  # an output no gradient reached (a compiled step's backward calls the hook with None)
                return
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
        path, call = self.stack.stack[-1][:2] if self.stack.stack else ("", 0)
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
        return Capture(self.opts.mode, entries, self.full, stats, self.calls, mods, ops, warns, stats_kernels=set(self.batcher.kernels),
                       dist=self.dist)

class LeanStatsRecorder:
    """Stats-only capture at the least host cost: one record per module call, made when the call returns (it sees
    the call's args, kwargs and output), no pre-hook, no module stack, no weak references. Used when nothing needs to
    know which module is running while it runs (no op capture or op sequence, no fault or float64 mode, no backward,
    no `keep`), which is what `--stats-only` asks by default. Why: on an H200 a plain HF forward is host-bound (the
    device is busy about 60% of it), so every microsecond spent per module call is added to the step; see
    docs/parity.md. `Capturer` calls `record` from a thin wrapper around each module's forward (capture._wrapped).

    Entries, keys, orders and the module sequence are the same as `Recorder`'s (tested): inputs are read when the
    call returns instead of when it starts, so an input the module changes in place is reduced after the change;
    the statistics path marks such a tensor `mutated` as it does for the full recorder.
    Deduplication holds the tensor itself (the statistics queue holds it anyway until its flush); the table is
    cleared at each flush, so memory stays bounded by the queue's budget.
    """

    def __init__(self, opts: CaptureOptions) -> None:
        self.batcher = StatsBatcher(opts.budget_bytes, fused={"auto": None, "triton": True, "torch": False}[opts.stats_kernel])
        # One record per module call, in the order the calls return (that order is the module sequence, and a
        # record's position + 1 is its `order`; a call's index among its path's calls is counted when the entries are
        # made): (path, in blob, out blob) for the common call of one tensor to one tensor, else
        # (path, [(io, leaf, blob), ...]).
        self.calls: list[tuple[Any, ...]] = []
        self.meta: list[tuple[Any, Any]] = []  # (shape, dtype) per blob: read once per distinct tensor
        self.seen: dict[int, tuple[torch.Tensor, int, int]] = {}
        self.dist: dict[int, dict[str, Any]] = {}

    def blob(self, t: torch.Tensor) -> int:
        hit = self.seen.get(id(t))
        version = t._version
        if hit is not None and hit[0] is t and hit[1] == version:
            return hit[2]
        return self._new(t, version)

    def _new(self, t: torch.Tensor, version: int) -> int:
        meta = self.meta
        blob = len(meta)
        meta.append((t.shape, t.dtype))
        held = t
        if type(t) is not _Tensor:
            held, placed = local(t)
            if placed is not None:
                self.dist[blob] = placed
        if self.batcher.add(blob, held, version):  # flushed: the queue let go of its large tensors, so does the table
            self.seen = {k: v for k, v in self.seen.items() if v[0].nbytes <= _SMALL}
        self.seen[id(t)] = (t, version, blob)
        return blob

    def record(self, path: str, args: tuple, kwargs: dict, output: Any) -> None:
        """Runs once per module call inside the forward, so the common case is written out (no blob() calls)."""
        if not kwargs and len(args) == 1:
            x = args[0]
            if type(x) is _Tensor and type(output) is _Tensor:  # Linear, norms, activations, MLPs
                hit = self.seen.get(id(x))
                version = x._version
                a = hit[2] if hit is not None and hit[0] is x and hit[1] == version else self._new(x, version)
                hit = self.seen.get(id(output))  # self.seen again: _new may have replaced it at a flush
                version = output._version
                b = hit[2] if hit is not None and hit[0] is output and hit[1] == version else self._new(output, version)
                self.calls.append((path, a, b))
                return
        leaves: list[tuple[str, torch.Tensor]] = []
        call_leaves(args, kwargs, leaves)
        n_in = len(leaves)
        if type(output) is _Tensor:
            leaves.append(("", output))
        else:
            flatten(output, "", leaves)
        blob = self.blob
        self.calls.append((path, [("in" if i < n_in else "out", leaf, blob(t)) for i, (leaf, t) in enumerate(leaves)]))

    def finish(self, warns: list[str], synchronize: Callable[[], None], layout: "Layout | None" = None) -> Capture:
        """The step's Capture. `layout` is the previous step's (same Capturer): a loop that captures every step
        usually calls the same modules with the same shapes each time, and then its entries and module sequence
        (about a microsecond per entry to build, as much as the recording itself) are reused, not rebuilt."""
        self.batcher.flush()  # the last launches first: the device reduces while the host builds the entries
        if layout is not None and layout.calls == self.calls and layout.meta == self.meta:
            entries, mods = list(layout.entries), list(layout.mods)
        else:
            entries, mods = self.entries()
        self.layout = Layout(self.calls, self.meta, entries, mods)
        self.seen.clear()
        stats = self.batcher.finish()
        synchronize()
        return Capture("stats", entries, {}, stats, {}, mods, None, warns, stats_kernels=set(self.batcher.kernels), dist=self.dist)

    def entries(self) -> tuple[list[Entry], list[str]]:
        """The entries and the module sequence (call keys), counting each path's calls on the way."""
        names = {d: str(d).removeprefix("torch.") for d in {m[1] for m in self.meta}}
        meta = [(shape, names[dtype]) for shape, dtype in self.meta]
        # tuple.__new__ skips the NamedTuple's Python-level __new__ (once per captured tensor); shapes stay torch.Size.
        make = tuple.__new__
        out: list[Entry] = []
        add = out.append
        mods: list[str] = []
        counts: dict[str, int] = {}
        for seq, rec in enumerate(self.calls, 1):
            path = rec[0]
            call = counts.get(path, 0)
            counts[path] = call + 1
            head = f"{path or ROOT}#{call}"
            mods.append(head)
            head += ":"
            if len(rec) == 3:
                add(make(Entry, (head + "in.args[0]", path, call, "in", ".args[0]", *meta[rec[1]], rec[1], seq, None)))
                add(make(Entry, (head + "out", path, call, "out", "", *meta[rec[2]], rec[2], seq, None)))
            else:
                for io, leaf, blob in rec[1]:
                    add(make(Entry, (head + io + leaf, path, call, io, leaf, *meta[blob], blob, seq, None)))
        return out, mods
