"""Kineto's own lines on file descriptor 2, kept from the user: every command that runs torch.profiler (profile
record, bench's kernel check and whole-step timing) wraps the profiled region in `without_profiler_chatter()`."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator


@contextlib.contextmanager
def without_profiler_chatter() -> Iterator[None]:
    """Kineto prints "USDT: ... profiler_start/stop" lines on file descriptor 2 when a trace starts and stops, a
    library's internal log a user must not see. fd 2 goes to a temporary file while the profiler runs (Python's
    own stderr keeps the terminal, for the progress lines); what else was written there is passed on after."""
    try:
        saved = os.dup(2)
    except OSError:  # no usable fd 2 (a closed stderr): nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        original = sys.stderr
        sys.stderr = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
        try:
            yield
        finally:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = original
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            rest = [ln for ln in sink.read().decode("utf-8", "replace").splitlines() if not ln.startswith("USDT:")]
            if rest:
                print("\n".join(rest), file=sys.stderr)
