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

import copy
import logging
import os
import time
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from npuport.bench.candidates import Prepared, Unsupported, first_line
from npuport.bench.rebuild import Runnable

# where torch.compile's messages come from: dynamo (tracing, guards, recompiles), AOTAutograd, inductor, and the
# FX / fake-tensor machinery under them
COMPILER_LOGGERS = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx", "torch._subclasses", "torch._guards")
COMPILER_MODULES = r"torch\.(_dynamo|_inductor|_functorch|fx|_subclasses|_guards|_logging)\b"
SILENT = logging.CRITICAL + 1
# with --debug: dynamo's progress per compile (one "start tracing" / "done tracing" pair per case), every
# recompile with the guard that failed (graph breaks cannot happen: fullgraph=True fails on them)
DEBUG_LOGS: dict[str, Any] = {"dynamo": logging.INFO, "recompiles": True}


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


@contextmanager
def compiler_output(debug: bool = False) -> Iterator[None]:
    """The compiler's logs and warnings for the span of a bench run. By default none reach the terminal: what matters
    of them (a failed compile, a refused recompile and its guard) is in the case result. With `debug`, dynamo's
    progress and recompile reasons are logged (DEBUG_LOGS). With TORCH_LOGS set, torch's logging is left as that
    asked. Logger levels, torch's log settings and the warning filters are restored afterwards."""
    if os.environ.get("TORCH_LOGS"):  # asked for through torch's own switch: torch's settings stand, as set_logs does
        yield
        return
    if debug:
        with _torch_logs(**DEBUG_LOGS):
            yield
        return
    manager = logging.Logger.manager
    named = [logging.getLogger(name) for name in COMPILER_LOGGERS]  # created now: loggers made later inherit SILENT
    below = [lg for name, lg in list(manager.loggerDict.items())
             if isinstance(lg, logging.Logger) and name.startswith(tuple(n + "." for n in COMPILER_LOGGERS))]
    saved = {lg.name: (lg, lg.level) for lg in named + below}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=COMPILER_MODULES)
        # torch's deprecation notices about its own modules: inductor's imports load torch.utils.mkldnn, which uses
        # the deprecated torch.jit.script_method
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
        for lg, _level in saved.values():
            lg.setLevel(SILENT)
        try:
            yield
        finally:
            for lg, level in saved.values():
                lg.setLevel(level)


@contextmanager
def _torch_logs(**settings: Any) -> Iterator[None]:
    """torch._logging.set_logs for a span, then the settings found before it (TORCH_LOGS included) back."""
    internal = torch._logging._internal
    saved = getattr(internal, "_get_log_state", None)  # private: torch 2.11 and 2.13 have it
    before = copy.deepcopy(saved()) if saved else None
    torch._logging.set_logs(**settings)
    try:
        yield
    finally:
        if before is None:
            torch._logging.set_logs()  # torch's defaults: the best this torch allows
        else:
            internal._set_log_state(before)
            internal._init_logs()
