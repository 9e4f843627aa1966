"""Finding the compiled extension (`npuport_ascendc_ext`, built by `npuport kernels build`)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from npuport.errors import NpuportError

EXT_NAME = "npuport_ascendc_ext"
BUILD_DIR_ENV = "NPUPORT_ASCENDC_BUILD"  # where `kernels build --out-dir` put it, if not importable already


def default_build_dir() -> Path:
    return Path(os.environ.get(BUILD_DIR_ENV, Path.home() / ".cache" / "npuport" / "ascendc"))


def load_extension() -> ModuleType:
    """Import the extension (it imports torch_npu itself); a clear NpuportError when it is not built."""
    build = str(default_build_dir())
    if build not in sys.path and Path(build).is_dir():
        sys.path.append(build)
    try:
        return importlib.import_module(EXT_NAME)
    except ImportError as exc:
        raise NpuportError(
            "the npuport Ascend C extension is not built or not importable",
            f"run `npuport kernels build` on a machine with CANN + torch_npu (looked in {build})",
            f"{type(exc).__name__}: {exc}",
        ) from exc
