"""The audit with Python's cyclic garbage collector paused.

The audit builds several hundred thousand small objects (fake tensors, recorded calls, reported calls, report rows)
that all live until the report is written. The collector's generational passes walk them again and again while they
pile up, a cost that grows faster than the model's depth: on Llama-2-70B about a quarter of the audit's time
(docs/performance.md). Nothing the audit builds needs collecting before it ends; the collector's earlier state is
restored on the way out, so that a caller's process (a notebook, a test run) keeps its own setting.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
