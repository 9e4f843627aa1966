"""The one place npuport imports torch_npu, and what the Ascend runtime says about itself (CANN, driver).

Importing torch_npu changes how `import torch` behaves (backend autoload) and fails without CANN, so nothing
else in npuport imports it: every caller comes through `import_torch_npu` or `try_import_torch_npu`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any

from npuport.errors import NpuportError

STANDIN_ENV = "NPUPORT_NPU_STANDIN"


def torch_npu_installed() -> bool:
    if getattr(sys.modules.get("torch_npu"), "__npuport_fake__", False):  # the audit's stand-in, not an installation
        return False
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except ValueError:  # a torch_npu in sys.modules without a spec: someone else's stand-in
        return False


def import_torch_npu(spec: str) -> Any:
    """The real torch_npu for device `spec`, or a NpuportError saying why this machine cannot run it."""
    try:
        import torch_npu  # noqa: F401, PLC0415 - registers the npu backend with torch; imported only when asked for
    except ImportError:
        raise NpuportError(f"device {spec!r} is not present", f"torch_npu and CANN installed (or {STANDIN_ENV}=1 in tests)",
                           "torch_npu is not installed") from None
    except Exception as exc:  # CANN missing or mismatched: torch_npu fails at import
        raise NpuportError(f"device {spec!r} is not present", "a working torch_npu + CANN", f"{type(exc).__name__}: {exc}") from None
    return torch_npu


def try_import_torch_npu() -> types.ModuleType | None:
    """The real torch_npu when it is installed and imports here; None otherwise (and never an npuport stand-in)."""
    current = sys.modules.get("torch_npu")
    if current is not None:
        return None if getattr(current, "__npuport_fake__", False) else current
    if not torch_npu_installed():
        return None
    try:
        import torch_npu  # noqa: F401, PLC0415 - see the module docstring
    except Exception:  # installed but unusable here (no CANN)
        sys.modules.pop("torch_npu", None)
        return None
    return sys.modules["torch_npu"]


def cann_version(npu: Any) -> str | None:
    version = getattr(getattr(npu, "version", None), "cann", None)
    if version:
        return str(version)
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    for path in ([os.path.join(home, "version.cfg")] if home else []) + ["/usr/local/Ascend/ascend-toolkit/latest/version.cfg"]:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read().strip().splitlines()[-1][:200]
    return None


def npu_driver() -> str | None:
    path = "/usr/local/Ascend/driver/version.info"
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as fh:
            return " ".join(fh.read().split())[:200]
    return None
