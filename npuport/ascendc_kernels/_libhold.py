"""Holds the torch.library.Library objects for the process lifetime.

A Library deregisters its ops when garbage-collected; keeping the handles in a module nothing reloads means
`importlib.reload` of the registry or of torch_ops neither re-registers nor drops the ops.
"""

from __future__ import annotations

from typing import Any

LIBS: list[Any] = []
