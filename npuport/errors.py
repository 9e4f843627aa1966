"""Two kinds of error: a user's mistake (NpuportError, exit 2, one clear message) and everything else (a bug).

The message format is fixed so users and CI logs can rely on it: the first line says what failed and what was
expected, the second what was received.
"""

from __future__ import annotations


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
