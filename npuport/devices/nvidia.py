"""The one place npuport runs nvidia-smi (and npu-smi): read-only queries, never a setting."""

from __future__ import annotations

import shutil
import subprocess


def run_tool(cmd: list[str], timeout: float = 5.0) -> str | None:
    """stdout of a vendor tool, or None when it is absent, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def nvidia_smi_present() -> bool:
    return shutil.which("nvidia-smi") is not None


def query(fields: tuple[str, ...], index: int, units: bool = False) -> list[str] | None:
    """One row of `nvidia-smi --query-gpu` for GPU `index`, one string per field (None when it cannot answer)."""
    fmt = "csv,noheader" if units else "csv,noheader,nounits"
    out = run_tool(["nvidia-smi", f"--query-gpu={','.join(fields)}", f"--format={fmt}", "-i", str(index)])
    if not out or not out.strip():
        return None
    parts = out.strip().splitlines()[0].split(",")
    return parts if len(parts) == len(fields) else None


def driver_version() -> str | None:
    out = run_tool(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=10)
    return out.strip().splitlines()[0] if out and out.strip() else None
