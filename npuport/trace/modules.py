"""Which nn.Module call is running: one stack of (path, call index, type), named from the model's own module tree,
used by the audit's recorder and by parity capture.

Two ways to attach, for two needs:
- `with stack:` registers global forward hooks: every module is seen, including one created during forward (named
  below its parent as `parent.<Type>`); the audit's recorder reads `current_frame()` for each recorded op.
- `with stack.attached():` registers hooks on each of the root's modules, with the call's kwargs, and calls
  `on_enter(path, call, args, kwargs)` / `on_exit(path, call, output)` with torch's dispatch modes off, so a
  capture can read module inputs and outputs without recording its own ops.
Push on forward-pre, pop on forward (always, even when the forward raises).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._python_dispatch import _disable_current_modes

_NO_MODES = contextlib.nullcontext()


def modes_off() -> Any:
    """Hooks run their own torch ops outside the dispatch modes (faults, op tap); skipped when none is active."""
    return _disable_current_modes() if torch._C._len_torch_dispatch_stack() else _NO_MODES


class ModuleStack:
    def __init__(self, root: torch.nn.Module) -> None:
        self.root = root
        self.names: dict[torch.nn.Module, str] = {m: n for n, m in root.named_modules(remove_duplicate=True)}
        self.types: dict[str, str] = {n: type(m).__name__ for m, n in self.names.items()}
        self.stack: list[tuple[str, int, str]] = []  # (path, call index of that path, module type)
        self.counts: dict[str, int] = {}
        self.on_enter: Callable[[str, int, tuple, dict], None] | None = None
        self.on_exit: Callable[[str, int, Any], None] | None = None
        self._handles: list[Any] = []

    def current(self) -> str | None:
        """The running module's path (None outside every module)."""
        return self.stack[-1][0] if self.stack else None

    def current_frame(self) -> tuple[str, str]:
        """(path, type) of the running module; ("", "") outside every module."""
        if not self.stack:
            return ("", "")
        path, _, kind = self.stack[-1]
        return (path, kind)

    def reset(self) -> None:
        self.stack, self.counts = [], {}

    def _push(self, path: str, kind: str) -> tuple[str, int]:
        call = self.counts.get(path, 0)
        self.counts[path] = call + 1
        self.stack.append((path, call, kind))
        return path, call

    # -- global hooks (every module, no kwargs, no callbacks) -----------------------------------------------------
    def _global_pre(self, module: torch.nn.Module, args: object) -> None:
        name = self.names.get(module)
        if name is None:  # a module created during forward: attribute it below its parent
            parent = self.stack[-1][0] if self.stack else ""
            name = f"{parent}.<{type(module).__name__}>" if parent else f"<{type(module).__name__}>"
        self._push(name, type(module).__name__)

    def _global_post(self, module: torch.nn.Module, args: object, output: object) -> None:
        if self.stack:
            self.stack.pop()

    def __enter__(self) -> ModuleStack:
        self._handles = [register_module_forward_pre_hook(self._global_pre),
                         register_module_forward_hook(self._global_post, always_call=True)]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.stack.clear()

    # -- per-module hooks (the root's modules, with kwargs and callbacks) ----------------------------------------
    @contextlib.contextmanager
    def attached(self) -> Iterator[ModuleStack]:
        handles = []
        for mod in self.names:
            handles.append(mod.register_forward_pre_hook(self._pre, with_kwargs=True))
            handles.append(mod.register_forward_hook(self._post, with_kwargs=True, always_call=True))
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    def _pre(self, mod: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        path, call = self._push(self.names[mod], type(mod).__name__)
        if self.on_enter:
            with modes_off():
                self.on_enter(path, call, args, kwargs)

    def _post(self, mod: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        path, call, _ = self.stack.pop() if self.stack else (self.names[mod], 0, "")
        if self.on_exit:
            with modes_off():
                self.on_exit(path, call, output)
