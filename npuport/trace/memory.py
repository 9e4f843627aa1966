"""Device memory of one traced step, measured on fake tensors as the step runs: every storage counted once (views
and in-place outputs share it) from the op that creates it until the last reference goes, the peak and the
module running at the peak, and what each module's forward leaves alive (the activations kept for backward).

No autograd hook is installed: saved-tensor hooks make autograd detach what it saves, which would add ops to the
very trace this measures; what stays alive after forward is read from the live bytes instead.

Fake tensors carry real storage sizes, so this is what the device allocator would be asked for by the ops the
model runs (before the allocator's rounding and caching); what the trace cannot see (library workspaces, the
runtime's context, the optimizer step when the caller runs none) is added by npuport.cost.memory from data.
"""

from __future__ import annotations

import sys
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from npuport.trace.modules import ModuleStack


@dataclass
class MemoryTrace:
    """What one scenario held on the device, in bytes."""

    weights: int = 0  # parameters and buffers
    inputs: int = 0  # the step's inputs: token ids, masks, a decode step's cache
    # what a torch.compile(mode="reduce-overhead") replay copies into its graph first: the input tensors that are not
    # weights nor marked static (torch._dynamo.mark_static_address, as transformers' StaticCache marks its cache), and
    # their bytes
    input_tensors: int = 0
    copied_inputs: int = 0
    peak: int = 0  # everything alive at the step's highest point
    peak_module: str = ""  # the module running at that point
    peak_phase: str = ""  # forward or backward
    after: int = 0  # alive when the step returned (outputs the caller holds, gradients)
    grads: int = 0  # parameter gradients alive at the end of a training step
    saved: int = 0  # alive when forward returned, beyond the weights and inputs: activations kept for backward and outputs
    saved_by_module: dict[str, int] = field(default_factory=dict)  # what each module's forward left alive (children included)

    def to_json(self) -> dict[str, Any]:
        return {"weights": self.weights, "inputs": self.inputs, "peak": self.peak, "peak_module": self.peak_module,
                "peak_phase": self.peak_phase,
                "after": self.after, "grads": self.grads, "saved": self.saved,
                "saved_by_module": dict(sorted(self.saved_by_module.items(), key=lambda kv: -kv[1]))}


def _tensors(tree: Any, depth: int = 4) -> list[torch.Tensor]:
    """The tensors in nested containers and in the attributes of objects such as a KV cache (a few levels down)."""
    out: list[torch.Tensor] = []
    for leaf in tree_flatten(tree)[0]:
        if isinstance(leaf, torch.Tensor):
            out.append(leaf)
        elif depth > 0 and hasattr(leaf, "__dict__") and not isinstance(leaf, (type, torch.nn.Module)):
            out += _tensors(list(vars(leaf).values()), depth - 1)
    return out


class MemoryTracker(TorchDispatchMode):
    """`with MemoryTracker(stack) as mem: mem.seed(...); run the step` then `mem.result`.

    With `recorder` (a npuport.trace.recorder.Recorder running the same step) the tracker is one of the recorder's
    observers instead of a dispatch mode of its own: the same counts, one Python mode less on every op."""

    def __init__(self, stack: ModuleStack, recorder: Any = None) -> None:
        super().__init__()
        self.stack = stack
        self.recorder = recorder
        self.live = 0
        self.result = MemoryTrace()
        self._sizes: dict[int, int] = {}  # storage key -> bytes, while alive
        self._saved_by: dict[str, int] = defaultdict(int)
        self._entry: list[int] = []  # live bytes when each running module's forward began
        mod = sys.modules.get("torch.distributed.tensor")  # DTensor, when the traced code uses it
        self.dtensor: type | None = getattr(mod, "DTensor", None) if mod is not None else None
        self._handles: list[Any] = []
        self._patched: list[tuple[Any, str, Any]] = []
        self._base = 0
        # open watches of the highest live bytes and the module then running (npuport.trace.reuse measures a
        # template layer's rise above its entry with one)
        self._watches: list[list[Any]] = []
        self.before = 0  # live bytes before the last op's outputs were counted
        if recorder is not None:
            recorder.memory = self

    # -- storages ------------------------------------------------------------------------------------------------
    def _key(self, t: torch.Tensor) -> tuple[int, Any] | None:
        t = getattr(t, "_local_tensor", t)  # a DTensor holds this rank's shard: that is what the device stores
        if t.layout != torch.strided:
            return None
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without storage (nested, sparse): not counted
            return None
        return st._cdata, st

    def _count(self, t: torch.Tensor) -> int:
        got = self._key(t)
        if got is None:
            return 0
        key, st = got
        if key in self._sizes:
            return 0
        n = int(st.nbytes())
        self._sizes[key] = n
        self.live += n
        weakref.finalize(st, self._free, key)
        return n

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def seed(self, module: torch.nn.Module, inputs: Iterable[Any]) -> None:
        """What is alive before the step: the weights and the inputs."""
        for p in list(module.parameters()) + list(module.buffers()):
            self.result.weights += self._count(p)
        weights = set(self._sizes)
        seen: set[int] = set()
        copied: set[int] = set()
        for t in _tensors(list(inputs)):
            self.result.inputs += self._count(t)  # bytes per storage: views of one buffer share it
            got = self._key(t)
            # tensors per object: a graph copies each input tensor it is given, views of one buffer each on its own;
            # one object passed twice, a weight passed as an input, or a tensor marked static is not copied
            if (got is None or got[0] in weights or id(t) in seen or t.numel() == 0
                    or getattr(t, "_dynamo_static_input_type", None) is not None):
                continue
            seen.add(id(t))
            self.result.input_tensors += 1
            if got[0] not in copied:
                copied.add(got[0])
                self.result.copied_inputs += self._sizes.get(got[0], 0)
        self._base = self.live
        self._mark()

    def _mark(self) -> None:
        if self.live > self.result.peak:
            self.result.peak = self.live
            self.result.peak_module = self.stack.current() or ""
            self.result.peak_phase = "backward" if torch._C._current_autograd_node() is not None else "forward"
        for w in self._watches:
            if self.live > w[0]:
                w[0], w[1] = self.live, self.stack.current() or ""

    # -- what a layer that did not run would have done (npuport.trace.reuse) ---------------------------------------
    def watch(self) -> list[Any]:
        """Start following the highest live bytes: [bytes, module at that point], updated until unwatch()."""
        w: list[Any] = [self.live, self.stack.current() or ""]
        self._watches.append(w)
        return w

    def unwatch(self, w: list[Any]) -> None:
        self._watches.remove(w)

    def replay(self, rise: int, module: str, kept: int, phase: str = "forward") -> None:
        """A layer that did not run (npuport.trace.reuse): its transient high (`rise` above the live bytes now, while
        `module` ran) and the bytes it leaves alive besides its outputs and their gradients: what a forward keeps
        (a cache's new entries, activations for backward), negative where a backward frees them."""
        high = self.live + rise
        if high > self.result.peak:
            self.result.peak, self.result.peak_module, self.result.peak_phase = high, module, phase
        for w in self._watches:
            if high > w[0]:
                w[0], w[1] = high, module
        self.live += kept
        self._mark()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        if self.dtensor is not None and self.dtensor in types:  # counted once, as the local ops it runs
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        self._seen(out)
        return out

    def _seen(self, out: Any) -> None:
        self.before = self.live
        if isinstance(out, torch.Tensor):
            self._count(out)
        else:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self._count(t)
        self._mark()

    def saved_under(self, path: str) -> dict[str, int]:
        """What the forwards of the submodules of `path` left alive so far, by path relative to it ('.mlp')."""
        return {k[len(path):]: v for k, v in self._saved_by.items() if path and k.startswith(path + ".")}

    def add_saved(self, name: str, n: int) -> None:
        """What a module that did not run would have left alive (npuport.trace.reuse)."""
        self._saved_by[name] += n

    # -- what each module's forward leaves alive -----------------------------------------------------------------
    def _pre(self, module: torch.nn.Module, args: object) -> None:
        self._entry.append(self.live)

    def _post(self, module: torch.nn.Module, args: object, output: object) -> None:
        if not self._entry:
            return
        start = self._entry.pop()
        if torch.is_grad_enabled() and torch._C._current_autograd_node() is None:
            name = self.stack.names.get(module)
            if name is None:  # made during forward: named below its parent as the module stack names it (the
                # stack's own hook, registered first, has already popped it)
                parent = self.stack.current()
                name = f"{parent}.<{type(module).__name__}>" if parent else f"<{type(module).__name__}>"
            if name != "":  # the root is the whole step: `saved` is its total
                self._saved_by[name] += self.live - start

    def forward_done(self) -> None:
        """Call when forward has returned (before backward): what is alive beyond weights and inputs is kept."""
        self.result.saved = self.live - self._base

    def __enter__(self) -> MemoryTracker:
        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post, always_call=True)]
        self._patched = self._watch_fsdp_storage()
        if self.recorder is not None:
            self.recorder.observers.append(self._seen)
            return self
        return super().__enter__()  # type: ignore[no-any-return]  # TorchDispatchMode.__enter__ returns self

    def __exit__(self, *exc: Any) -> None:
        if self.recorder is not None:
            self.recorder.observers.remove(self._seen)
        else:
            super().__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles = []
        for mod, name, fn in self._patched:
            setattr(mod, name, fn)
        self._patched = []

    def _watch_fsdp_storage(self) -> list[tuple[Any, str, Any]]:
        """FSDP2 frees a unit's gathered parameters by resizing their storage to 0 bytes (and back before the next
        all-gather): no op is dispatched, so the tracker is told here, or a resharded layer would stay counted."""
        mod = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_param")
        saved = [(mod, n, getattr(mod, n)) for n in ("free_storage", "alloc_storage") if mod is not None and hasattr(mod, n)]
        for m, name, fn in saved:
            def resized(tensor: torch.Tensor, _fn: Any = fn) -> None:
                _fn(tensor)
                self._resized(tensor)
            setattr(m, name, resized)
        return saved

    def _resized(self, t: torch.Tensor) -> None:
        got = self._key(t)
        if got is None:
            return
        key, st = got
        n = int(st.nbytes())
        if key not in self._sizes:  # first seen now: from here on it is tracked like any storage
            weakref.finalize(st, self._free, key)
        self.live += n - self._sizes.get(key, 0)
        self._sizes[key] = n
        self._mark()

    def finish(self, module: torch.nn.Module) -> MemoryTrace:
        """Close the books when the step has returned (call before the caller drops its outputs)."""
        r = self.result
        r.after = self.live
        # each storage once: FSDP2's sharded gradients are views of one reduce-scatter output per unit
        stores = {st._cdata: int(st.nbytes()) for p in module.parameters() if p.grad is not None
                  for st in [getattr(p.grad, "_local_tensor", p.grad).untyped_storage()]}
        r.grads = sum(stores.values())
        if not r.saved and not r.grads:  # inference: nothing is kept for a backward
            r.saved = 0
        r.saved_by_module = {k: v for k, v in self._saved_by.items() if v > 0}
        return r
