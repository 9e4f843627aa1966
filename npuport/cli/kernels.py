"""`npuport kernels list | build | test | perf`: the Ascend C kernels, their build, CPU checks and estimates.

Declares the options and help; the work, a thin shell over npuport.ascendc_kernels (registry, build, checks,
estimates), is in npuport.cli.kernels_impl, imported (with torch) only when a subcommand runs. Exit codes: 0 ok,
1 a check failed, 2 a user error or a missing toolchain (one `error:` line on stderr, no traceback).
"""

from __future__ import annotations

from typing import Any

import click

from npuport.cli.common import check_new, check_out_dir, handle_errors
from npuport.cli.lazy import Command, Group
from npuport.cli.options import DEFAULT_CHIP, chip_option, deprecated, quiet_debug, report_options
from npuport.cost.roofline import get_chip

FORMATS = ("text", "json")


@click.group("kernels", cls=Group)
def kernels() -> None:
    """Ascend C kernels (rms_norm, add_rms_norm, layer_norm, flash_attention): list, build, test, perf.

    \b
    Examples:
      npuport kernels list
      npuport kernels build --dry-run
      npuport kernels test --kernel rms_norm
      npuport kernels perf --chip Ascend910B
    """


@kernels.command("list", cls=Command, impl="npuport.cli.kernels_impl:list_cmd")
@report_options(FORMATS)
@deprecated("--json", "as_json", is_flag=True, use="--format json", into="fmt", convert=lambda _v: "json")
@quiet_debug
@handle_errors
def list_cmd(output: str | None, json_out: str | None, force: bool, **_: Any) -> None:
    """The kernels, the fusion patterns they replace, their constraints and what was verified where.

    \b
    Examples:
      npuport kernels list
      npuport kernels list --format json -o kernels.json
    """
    check_new([output, json_out], force)


@kernels.command("build", cls=Command, impl="npuport.cli.kernels_impl:build_cmd")
@click.option("--kernel", "names", multiple=True, help="Kernel to build (repeatable; default all).")
@click.option("--out-dir", "out_dir", metavar="DIR", help="Build directory (default: $NPUPORT_ASCENDC_BUILD, else ~/.cache/npuport/ascendc).")
@click.option("--dry-run", is_flag=True, help="Print the commands without running them (compiles nothing).")
@deprecated("--out", "out", metavar="DIR", use="--out-dir", into="out_dir")
@quiet_debug
@handle_errors
def build_cmd(**_: Any) -> None:
    """Compile the kernels with the CANN toolchain (bisheng) and build the torch_npu extension.

    \b
    Examples:
      npuport kernels build --dry-run                 # the commands, nothing compiled
      npuport kernels build --kernel rms_norm --out-dir build/ascendc
    """
    check_out_dir(_.get("out_dir"), "--out-dir")


@kernels.command("test", cls=Command, impl="npuport.cli.kernels_impl:test_cmd")
@click.option("--kernel", "names", multiple=True, help="Kernel to check (repeatable; default all).")
@quiet_debug
@handle_errors
def test_cmd(**_: Any) -> None:
    """Schedule reference vs float64 golden on awkward shapes, on CPU (not the compiled kernel).

    \b
    Examples:
      npuport kernels test
      npuport kernels test --kernel layer_norm --kernel rms_norm
    """


@kernels.command("perf", cls=Command, impl="npuport.cli.kernels_impl:perf_cmd")
@chip_option(DEFAULT_CHIP, f"{DEFAULT_CHIP} (mappings/hardware.yaml default_target)")
@quiet_debug
@handle_errors
def perf_cmd(chip: str, **_: Any) -> None:
    """Estimated time of each kernel at Llama-2-7B shapes (a model, not a measurement).

    \b
    Examples:
      npuport kernels perf
      npuport kernels perf --chip Ascend910B
    """
    get_chip(chip)
