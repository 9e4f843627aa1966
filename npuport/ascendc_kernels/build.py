"""CANN detection and the compile commands for the kernels and their host extension.

`find_toolchain` never guesses: it reports the CANN home ($ASCEND_HOME_PATH, else $ASCEND_TOOLKIT_HOME) and
the `bisheng` compiler (under the home's ccec_compiler, else on PATH); `build_steps` lists the commands;
`run_build` runs them. Without a toolchain the caller must say so and stop (exit 2) - nothing is faked.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from npuport.errors import NpuportError

HERE = Path(__file__).resolve().parent
NPU_ARCH = "dav-2201"  # Ascend910B / Atlas A2 (the older ccec naming: dav-c220-vec / dav-c220-cube)
KERNEL_SOURCES = {
    "rms_norm": HERE / "rms_norm" / "kernel.asc",
    "add_rms_norm": HERE / "add_rms_norm" / "kernel.asc",
    "layer_norm": HERE / "layer_norm" / "kernel.asc",
    "flash_attention": HERE / "flash_attention" / "kernel.asc",
}
KERNEL_LIB = "libnpuport_ascendc_kernels.so"


@dataclass(frozen=True)
class Toolchain:
    home: Path | None
    compiler: Path | None
    home_var: str | None = None  # the variable the home was read from (ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME)
    home_raw: str | None = None  # its value, also when it names no directory

    @property
    def found(self) -> bool:
        return self.home is not None and self.compiler is not None

    def why_not(self) -> str:
        if self.home is None and self.home_raw:
            what = "does not exist" if not Path(self.home_raw).exists() else "is not a directory"
            return (f"CANN toolkit not found: {self.home_var} names a path that {what}; nothing was compiled "
                    "(expected the CANN toolkit directory, set by sourcing <cann>/set_env.sh); "
                    f"received: {self.home_var}={self.home_raw}")
        if self.home is None:
            return ("CANN toolkit not found: ASCEND_HOME_PATH is not set; nothing was compiled (expected "
                    "ASCEND_HOME_PATH or ASCEND_TOOLKIT_HOME naming the CANN toolkit directory: source "
                    "<cann>/set_env.sh first); received: neither is set")
        return f"CANN home {self.home} has no bisheng/ccec compiler and none is on PATH; nothing was compiled"


@dataclass(frozen=True)
class BuildStep:
    what: str
    argv: tuple[str, ...]


def find_toolchain(env: dict[str, str] | None = None) -> Toolchain:
    env = dict(os.environ if env is None else env)
    var = next((v for v in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME") if env.get(v)), None)
    raw = env[var] if var else None
    home = Path(raw) if raw and Path(raw).is_dir() else None
    candidates: list[Path] = []
    if home is not None:
        arch = f"{platform.machine()}-linux"
        for sub in ("compiler/ccec_compiler/bin", f"{arch}/ccec_compiler/bin", "ccec_compiler/bin", "bin"):
            candidates += [home / sub / "bisheng", home / sub / "ccec"]
    for name in ("bisheng", "ccec"):
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            candidates.append(Path(found))
    compiler = next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
    return Toolchain(home, compiler, var, raw)


def build_steps(tc: Toolchain, out: Path, kernels: list[str] | None = None) -> list[BuildStep]:
    names = kernels or list(KERNEL_SOURCES)
    unknown = set(names) - set(KERNEL_SOURCES)
    if unknown:
        raise NpuportError("unknown kernel to build", ", ".join(KERNEL_SOURCES), ", ".join(sorted(unknown)))
    cc = str(tc.compiler or "bisheng")
    home = tc.home or Path("$ASCEND_HOME_PATH")
    inc = [f"-I{HERE}", f"-I{home / 'include'}", f"-I{home / 'include' / 'ascendc'}"]
    steps, objs = [], []
    for name in names:
        obj = out / f"{name}.o"
        objs.append(str(obj))
        steps.append(BuildStep(f"compile {name} ({NPU_ARCH})", (
            cc, "-x", "asc", f"--npu-arch={NPU_ARCH}", "-O2", "-std=c++17", "-fPIC", *inc, "-c",
            str(KERNEL_SOURCES[name]), "-o", str(obj))))
    steps.append(BuildStep("link kernel library", (cc, "-shared", f"--npu-arch={NPU_ARCH}", *objs, "-o",
                                                   str(out / KERNEL_LIB))))
    steps.append(BuildStep("build torch_npu extension", (
        sys.executable, "-m", "npuport.ascendc_kernels.host.build_ext", "--out", str(out), "--cann", str(home))))
    return steps


def run_build(steps: list[BuildStep], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for step in steps:
        proc = subprocess.run(step.argv, capture_output=True, text=True)
        if proc.returncode:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise NpuportError(f"build step failed: {step.what}", "exit status 0",
                               f"{proc.returncode}: {' | '.join(tail)}")
