"""The `npuport` command: a click group whose commands are loaded lazily (npuport.cli.lazy), so `npuport --help`
imports none of them. Each command lives in its own module (options and help) with its work in a *_impl module
that parses the flags into an npuport.api options dataclass, calls one npuport.api function and renders."""

from __future__ import annotations

import click

import npuport
from npuport.cli.lazy import LazyGroup

# command -> (module:attribute, the line `npuport --help` lists), in the order a migration uses them
COMMANDS = {
    "audit": ("npuport.cli.audit:audit", "The operator inventory: every op, shapes, FLOPs, bytes, roofline time, coverage "
                                        "on torch_npu, behaviour differences, CUDA-only source, fusion advice."),
    "migrate": ("npuport.cli.migrate:migrate", "The mechanical CUDA -> NPU source changes, as a diff (--write applies it)."),
    "parity": ("npuport.cli.parity:parity", "Numerical parity of the same model on two devices, first divergence located."),
    "bench": ("npuport.cli.bench:bench", "The hot ops benchmarked with their recorded shapes on this device."),
    "coverage": ("npuport.cli.coverage:coverage", "What a torch_npu release implements, per aten overload."),
    "profile": ("npuport.cli.profile:profile", "Measured profiles: import a torch.profiler trace, join it to the audit."),
    "kernels": ("npuport.cli.kernels:kernels", "npuport's Ascend C kernels: list, build (needs CANN), test, perf."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(npuport.__version__, prog_name="npuport")
def cli() -> None:
    """npuport: move PyTorch LLMs from CUDA to Ascend NPU knowing what changes.

    \b
    Examples:
      npuport audit examples/gpt/model.py                     what runs, what it costs, what changes on the NPU
      npuport audit --hf config.json --format html -o report.html
      npuport migrate train.py > npu.patch                    the mechanical source changes as a diff
      npuport parity --ref cuda --dev npu model.py            numerical parity, first divergence located

    Every command takes --quiet and --debug and shows its own examples with --help; docs/cli.md has the grammar
    they share. Exit codes: 0 done, 1 a check ran and failed, 2 bad input (one 'error:' line).
    """


def main() -> None:
    cli(prog_name="npuport")


if __name__ == "__main__":
    main()
