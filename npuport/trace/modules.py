"""Which nn.Module is running: a stack kept by global forward hooks, named from the model's own module tree."""

from __future__ import annotations

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook


class ModuleStack:
    """Push on forward-pre, pop on forward (always, even when the forward raises)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._names = {id(m): name for name, m in model.named_modules()}
        self.types: dict[str, str] = {name: type(m).__name__ for name, m in model.named_modules()}
        self._stack: list[tuple[str, str]] = []
        self._handles: list = []

    def current(self) -> tuple[str, str]:
        return self._stack[-1] if self._stack else ("", "")

    def _pre(self, module: torch.nn.Module, args: object) -> None:
        name = self._names.get(id(module))
        if name is None:  # a module created during forward: attribute it below its parent
            parent = self._stack[-1][0] if self._stack else ""
            name = f"{parent}.<{type(module).__name__}>" if parent else f"<{type(module).__name__}>"
        self._stack.append((name, type(module).__name__))

    def _post(self, module: torch.nn.Module, args: object, output: object) -> None:
        if self._stack:
            self._stack.pop()

    def __enter__(self) -> "ModuleStack":
        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack.clear()
