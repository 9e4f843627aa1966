"""Which fused kernels transformers replaced by its reference PyTorch code while the audit traced the model.

transformers calls some operations (Mamba's selective scan, causal conv1d, gated delta rules, ...) through kernels
from packages such as `mamba_ssm`, `causal_conv1d` or `flash-linear-attention`, which run on CUDA only. Without them
it runs a reference PyTorch implementation (often a loop over tokens or chunks) and logs it once. That is what the
audit traced, and what runs on an Ascend NPU unless a port of the kernel is available; a CUDA run with the package
installed runs one fused kernel instead. The audit says so in its notes.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from typing import Iterator

_LOGGER = "transformers.integrations.hub_kernels"
_PATTERN = re.compile(r"`(?P<func>[^`]+)` is falling back to its reference PyTorch implementation because `(?P<pkg>[^`]+)`")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        m = _PATTERN.search(record.getMessage())
        if m:
            self.found.setdefault(m["func"], m["pkg"])


@contextlib.contextmanager
def kernel_fallbacks() -> Iterator[dict[str, str]]:
    """Collect {function: package} for every reference fallback while the block runs; nothing reaches the terminal."""
    found: dict[str, str] = {}
    log = logging.getLogger(_LOGGER)
    handler = _Collect()
    saved = (log.level, log.propagate)
    if "transformers" in sys.modules:  # nothing to collect from a model that never loaded transformers
        try:
            from transformers.utils import logging as hf_logging  # noqa: PLC0415 - optional dependency, imported where it is used

            hf_logging.get_logger(_LOGGER).warning_once.cache_clear()  # logged once per process: log it again here
        except (ImportError, AttributeError):
            pass
    log.setLevel(logging.WARNING)
    log.propagate = False
    log.addHandler(handler)
    try:
        yield found
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]
        found.update(handler.found)


def notes_for(found: dict[str, str]) -> list[str]:
    by_pkg: dict[str, list[str]] = {}
    for func, pkg in found.items():
        by_pkg.setdefault(pkg, []).append(func)
    return [
        f"transformers ran the reference PyTorch code of {', '.join(f'`{f}`' for f in sorted(funcs))} because `{pkg}` "
        f"(CUDA kernels) is not available here: the inventory shows that reference path, which is what an Ascend NPU "
        f"runs unless a port of the kernel exists; a CUDA run with `{pkg}` installed runs a fused kernel instead"
        for pkg, funcs in sorted(by_pkg.items())
    ]
