"""torch.compile as a bench candidate: each case compiled once from a fresh dynamo state, a recompile counted and
reported instead of retried, and the compiler's own logs and warnings kept off the terminal unless asked for.

Why a reset per case: dynamo keeps what it compiled on a function's *code object*, not on the function object.
Every case's `run` (`Runnable.call_tensors`) is a closure of one code object, so a compiled function per case -
or one cached by the case key - still shares one cache with every other case: each new case was a recompile of
the last one (its guard on the closed-over op failed), and after `recompile_limit` (8) cases dynamo refused
(`compile n/a`) and logged a warning on every later call. `torch._dynamo.reset()` before each case gives it the
state of a new process; inductor's on-disk caches stay, so an op seen before still compiles fast.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from npuport.bench.candidates import Prepared, Unsupported, first_line
from npuport.bench.rebuild import Runnable


class Recompiled(Unsupported):
    """A case's compiled function was about to be compiled again (a guard failed between two of its calls, whose
    inputs are built alike): refused, so that no compile lands inside the timed region, and counted."""

    def __init__(self, message: str, recompiles: int) -> None:
        super().__init__(message)
        self.recompiles = recompiles


def compiled(r: Runnable, device: str, sync: Callable[[], None] | None = None, backend: str = "inductor") -> Prepared:
    """torch.compile of the single op (fullgraph, static shapes), compiled once on the first input set; compile time
    is paid here, outside the timed region, and reported as a note. Every other input set is called once too, with
    recompiles refused: a guard that would fail between the timed calls fails here, and is reported."""
    torch._dynamo.reset()  # see the module docstring: a fresh dynamo state per case, not a fresh function object
    start = _graphs()
    fn = torch.compile(r.call_tensors(), fullgraph=True, dynamic=False, backend=backend)

    def recompiles() -> int:
        return max(0, _graphs() - start - 1)

    @contextmanager
    def refuse_recompiles() -> Iterator[None]:
        with torch._dynamo.config.patch(error_on_recompile=True):
            try:
                yield
            except torch._dynamo.exc.RecompileError as exc:
                reason = " ".join(str(exc).split("guard failure(s):", 1)[-1].split()).lstrip("- ")
                raise Recompiled(f"recompile refused: {reason[:200]}", recompiles() + 1) from None

    t0 = time.perf_counter()
    try:
        fn(*r.tensor_sets[0])
        if sync:
            sync()
        took = time.perf_counter() - t0
        with refuse_recompiles():
            for ts in r.tensor_sets[1:]:
                fn(*ts)
    except Recompiled:
        raise
    except Exception as exc:  # noqa: BLE001 - the compiler failing on an op is a finding, not a crash
        raise Unsupported(f"torch.compile failed: {type(exc).__name__}: {first_line(exc)}") from None
    return Prepared("compile", lambda ts: fn(*ts), r.tensor_sets, note=f"compiled once in {took:.1f} s ({backend})",
                    timing=refuse_recompiles, recompiles=recompiles)


def _graphs() -> int:
    """Graphs dynamo has compiled in this process (its own counter; reset() leaves it alone)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
