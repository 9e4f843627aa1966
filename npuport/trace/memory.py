"""Device memory of one traced step, measured on fake tensors as the step runs: every storage counted once (views
and in-place outputs share it) from the op that creates it until the last reference goes, the peak and the
module running at the peak, and the bytes autograd saves for backward per module.

Fake tensors carry real storage sizes, so this is what the device allocator would be asked for by the ops the
model runs (before the allocator's rounding and caching); what the trace cannot see (library workspaces, the
runtime's context, the optimizer step when the caller runs none) is added by npuport.cost.memory from data.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from npuport.trace.modules import ModuleStack


@dataclass
class MemoryTrace:
    """What one scenario held on the device, in bytes."""

    weights: int = 0  # parameters and buffers
    inputs: int = 0  # the step's inputs: token ids, masks, a decode step's cache
    peak: int = 0  # everything alive at the step's highest point
    peak_module: str = ""  # the module running at that point
    peak_phase: str = ""  # forward or backward
    after: int = 0  # alive when the step returned (outputs the caller holds, gradients)
    grads: int = 0  # parameter gradients alive at the end of a training step
    saved: int = 0  # tensors autograd saved for backward (each storage once, parameters excluded)
    saved_by_module: dict[str, int] = field(default_factory=dict)

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
    """`with MemoryTracker(stack) as mem: mem.seed(...); run the step` then `mem.result`."""

    def __init__(self, stack: ModuleStack) -> None:
        super().__init__()
        self.stack = stack
        self.live = 0
        self.result = MemoryTrace()
        self._sizes: dict[int, int] = {}  # storage key -> bytes, while alive
        self._params: set[int] = set()
        self._saved_keys: set[int] = set()
        self._saved_by: dict[str, int] = defaultdict(int)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    # -- storages ------------------------------------------------------------------------------------------------
    def _key(self, t: torch.Tensor) -> tuple[int, Any] | None:
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
            got = self._key(p)
            if got is not None:
                self._params.add(got[0])
            self.result.weights += self._count(p)
        for t in _tensors(list(inputs)):
            self.result.inputs += self._count(t)
        self._mark()

    def _mark(self) -> None:
        if self.live > self.result.peak:
            self.result.peak = self.live
            self.result.peak_module = self.stack.current() or ""
            self.result.peak_phase = "backward" if torch._C._current_autograd_node() is not None else "forward"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._count(t)
        self._mark()
        return out

    # -- saved for backward --------------------------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        got = self._key(t)
        if got is not None and got[0] not in self._params and got[0] not in self._saved_keys:
            self._saved_keys.add(got[0])
            self._saved_by[self.stack.current() or "<model>"] += int(got[1].nbytes())
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def __enter__(self) -> MemoryTracker:
        self._hooks.__enter__()
        return super().__enter__()  # type: ignore[no-any-return]  # TorchDispatchMode.__enter__ returns self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._hooks.__exit__(*exc)

    def finish(self, module: torch.nn.Module) -> MemoryTrace:
        """Close the books when the step has returned (call before the caller drops its outputs)."""
        r = self.result
        r.after = self.live
        r.grads = sum(int(p.grad.untyped_storage().nbytes()) for p in module.parameters() if p.grad is not None)
        r.saved = sum(self._saved_by.values())
        r.saved_by_module = dict(self._saved_by)
        return r
