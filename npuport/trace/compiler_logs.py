"""torch.compile's own logs and warnings kept off the terminal while npuport compiles a user's model or op
(`bench`'s compile candidate, `parity` and `profile record` with mode=compile), unless asked for with --debug or
TORCH_LOGS.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

import torch

# where torch.compile's messages come from: dynamo (tracing, guards, recompiles), AOTAutograd, inductor, and the
# FX / fake-tensor machinery under them
COMPILER_LOGGERS = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx", "torch._subclasses", "torch._guards")
COMPILER_MODULES = r"torch\.(_dynamo|_inductor|_functorch|fx|_subclasses|_guards|_logging)\b"
SILENT = logging.CRITICAL + 1
# with --debug: dynamo's progress per compile (one "start tracing" / "done tracing" pair per case), every
# recompile with the guard that failed (graph breaks cannot happen: fullgraph=True fails on them)
DEBUG_LOGS: dict[str, Any] = {"dynamo": logging.INFO, "recompiles": True}


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
