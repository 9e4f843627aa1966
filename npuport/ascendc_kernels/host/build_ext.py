"""Builds the torch_npu C++ extension (npuport_ascendc_ext) against the compiled kernel library.

Run by `npuport kernels build` as `python -m npuport.ascendc_kernels.host.build_ext --out DIR --cann HOME`;
needs torch_npu and CANN, so it is only ever run on a machine that has them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from npuport.devices.backend import import_torch_npu

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cann", required=True, type=Path)
    args = ap.parse_args()
    torch_npu = import_torch_npu("npu")
    from torch.utils.cpp_extension import load  # noqa: PLC0415 - optional dependency, imported where it is used

    npu_root = Path(torch_npu.__file__).parent
    cann = args.cann
    load(
        name="npuport_ascendc_ext",
        sources=[str(HERE / "npuport_ascendc_ext.cpp")],
        extra_include_paths=[str(HERE.parent), str(npu_root / "include"), str(cann / "include"),
                             str(cann / "include" / "ascendc" / "host_api")],
        extra_ldflags=[f"-L{args.out}", "-lnpuport_ascendc_kernels", f"-Wl,-rpath,{args.out}",
                       f"-L{cann / 'lib64'}", "-lascendcl", "-ltiling_api", "-lplatform", "-lregister",
                       f"-L{npu_root / 'lib'}", "-ltorch_npu"],
        build_directory=str(args.out),
        verbose=True,
    )


if __name__ == "__main__":
    main()
