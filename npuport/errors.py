"""Two kinds of error: a user's mistake (NpuportError, exit 2, one clear message) and everything else (a bug).

The message format is fixed so users and CI logs can rely on it: the first line says what failed and what was
expected, the second what was received.
"""

from __future__ import annotations

import importlib.util
import os
import traceback


class NpuportError(Exception):
    """A problem with what the user gave us: bad path, bad option, a model that does not fit its inputs."""

    exit_code = 2

    def __init__(self, what: str, expected: str | None = None, received: str | None = None) -> None:
        self.what = what
        self.expected = expected
        self.received = received
        super().__init__(self.render())

    def render(self) -> str:
        line = self.what
        if self.expected:
            line += f" (expected {self.expected})"
        if self.received is not None:
            received = " ".join(str(self.received).split())
            if len(received) > 300:
                received = received[:297] + "..."
            line += f"; received: {received}"
        return line


class MappingError(NpuportError):
    """A file under mappings/ does not follow its schema. Raised at load, naming the file, entry and field."""

    def __init__(self, path: str, entry: str, field: str, problem: str) -> None:
        super().__init__(f"{path}: entry {entry!r}, field {field!r}: {problem}")


def where_in_user_code(exc: BaseException) -> str:
    """' at file.py:12' of the innermost traceback frame outside torch / npuport / installed libraries."""
    spec = importlib.util.find_spec("torch")  # its location only: importing torch here would slow every command's start
    torch_dir = os.path.dirname(spec.origin) if spec is not None and spec.origin else os.path.sep + "torch" + os.path.sep
    here = os.path.dirname(os.path.abspath(__file__))
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if not fr.filename.startswith((torch_dir, here)) and "site-packages" not in fr.filename:
            return f" at {os.path.basename(fr.filename)}:{fr.lineno}"
    return ""


def describe_exception(exc: BaseException) -> str:
    """'TypeError: first line of the message at file.py:12' — one line for a user-facing error. A first line that only
    announces what follows ("Validation error for field 'hidden_size':", as transformers' config checks write) is
    joined with the next line, where the reason is."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    msg = lines[0] if lines else ""
    if msg.endswith(":") and len(lines) > 1:
        msg = f"{msg} {lines[1]}"
    return f"{type(exc).__name__}: {msg}{where_in_user_code(exc)}"
