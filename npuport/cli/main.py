"""The `npuport` command: a click group; each subcommand lives in its own module and only parses, calls one
library function, and renders."""

from __future__ import annotations

import importlib

import click

import npuport
from npuport.cli.audit import audit


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(npuport.__version__, prog_name="npuport")
def cli() -> None:
    """npuport: move PyTorch LLMs from CUDA to Ascend NPU knowing what changes.

    \b
    audit     the operator inventory: every op, shapes, FLOPs, bytes, roofline time, class,
              coverage on torch_npu, behaviour differences, CUDA-only source, fusion advice
    coverage  what a torch_npu release implements, per aten overload
    migrate   the mechanical CUDA -> NPU source changes, as a diff (--write applies it)
    kernels   npuport's Ascend C kernels: list, build (needs CANN), test (schedule reference on CPU)
    parity    numerical parity of the same model on two devices, first divergence located
    bench     the hot ops benchmarked with their recorded shapes
    """


cli.add_command(audit)


def _optional(module: str, name: str) -> None:
    """Commands whose modules are optional at import (so --help works even if one of them is broken)."""
    try:
        cmd = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # a real missing dependency inside the command is a bug: let it show
            raise
        return
    cli.add_command(cmd)


for _module, _name in (
    ("npuport.cli.coverage", "coverage"),
    ("npuport.cli.migrate", "migrate"),
    ("npuport.cli.kernels", "kernels"),
    ("npuport.cli.parity", "parity"),
    ("npuport.cli.bench", "bench"),
):
    _optional(_module, _name)


def main() -> None:
    cli(prog_name="npuport")


if __name__ == "__main__":
    main()
