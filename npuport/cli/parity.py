"""`npuport parity`: cross-device numerical parity. Declares the options and help, checks what needs no model and
prints the first progress line; the work (npuport.api parity_run / parity_compare / parity_record, rendered with
npuport.render) is in npuport.cli.parity_impl, imported with torch only when a subcommand runs.

    npuport parity --ref cuda --dev npu MODEL                 both devices on this host
    npuport parity record --dev cuda MODEL --out-dir REF_DIR  on the reference machine
    npuport parity compare MODEL --ref REF_DIR --dev npu      on the other machine
    npuport parity compare --ref REF_DIR --dev DEV_DIR        two records
    torchrun --nproc-per-node N $(which npuport) parity record ...   one part per rank (docs/parity.md)

Exit codes: 0 parity holds, 1 divergence, 2 usage or input error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click
from click.core import ParameterSource

from npuport.cli.common import check_new, check_out_dir, handle_errors, say
from npuport.cli.lazy import Command, Group
from npuport.cli.options import (
    attn_option_real,
    deprecated,
    not_negative,
    quiet_debug,
    report_options,
    scenario_option,
    top_option,
    wide_option,
)
from npuport.errors import NpuportError
from npuport.model.scenarios import parse_scenario
from npuport.parity.identity import check_asked, record_manifest

FORMATS = ("text", "json", "markdown", "html")
DEFAULT_SCENARIO = "prefill:batch=1,seq=128"


class _ParityGroup(Group):
    """`npuport parity [OPTIONS] MODEL` without a subcommand name means `npuport parity run ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            first = args[0]
            # a bare word that is neither a subcommand nor a file is a mistyped subcommand, not a model to run
            # (a model is FILE or FILE:FUNCTION, and FILE itself may hold a ':')
            if not first.startswith("-") and not (Path(first).exists() or Path(first.rsplit(":", 1)[0]).exists()):
                raise click.UsageError(f"no parity subcommand or model file '{first}' (expected one of "
                                       f"{', '.join(sorted(self.commands))}, or a model.py)", ctx)
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.argument("model", required=False),
        click.option("--hf", "hf_config", metavar="CONFIG.json", help="A Hugging Face architecture from its config.json (random seeded weights)."),
        click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model."),
        click.option("--dtype", help="Model dtype (float32, float16, bfloat16; default: the config's / the model's)."),
        attn_option_real,
        scenario_option(DEFAULT_SCENARIO, value=DEFAULT_SCENARIO),
        click.option("--seed", default=0, show_default=True, help="Seed for weights (seed), inputs (seed+1) and the run (seed+2)."),
        click.option("--stats-only", is_flag=True, help="Keep per-tensor statistics and samples, not tensors (large models)."),
        click.option("--ops", is_flag=True, help="Also capture every aten op's outputs (dispatch mode)."),
        click.option("--op-sequence/--no-op-sequence", default=None, help="Record the aten op sequence (default: on, off with --stats-only)."),
        click.option("--backward", is_flag=True, help="Capture gradients (module output grads, parameter grads): a training step."),
        click.option("--stats-budget", type=click.IntRange(min=1), metavar="MIB",
                     help="With --stats-only: MiB of activations queued between statistics flushes "
                          "(default: 1/8 of the device's free memory, 256 MiB to 8 GiB; fewer flushes are faster, "
                          "a larger queue holds more memory)."),
        click.option("--keep", multiple=True, metavar="PATTERN", help="Module paths (fnmatch) kept in full even with --stats-only."),
        click.option("--allow-tf32", is_flag=True, help="Leave TF32 (CUDA) / HF32 (NPU) on; float32 then uses the float32-tf32 tolerances."),
        click.option("--no-deterministic", is_flag=True, help="Do not switch on deterministic algorithms."),
        click.option("--train-mode", is_flag=True, help="Run in training mode (dropout on; RNG streams differ across devices)."),
        quiet_debug,
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _golden(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The golden is float64: cpu64 run now, or a record of one (a folder); `cpu` would compare in float32."""
    if value is not None and value != "cpu64" and not Path(value).is_dir():
        raise click.BadParameter(f"expected cpu64 or a record folder of a cpu64 run, received {value!r}")
    return value


def _report_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--golden", metavar="cpu64|DIR", callback=_golden, help="A float64 golden: cpu64 runs the model on the CPU in float64; the verdict becomes relative."),
        click.option("--k", "k", type=float, callback=not_negative, help="Relative verdict factor for every dtype (default: per dtype in mappings/tolerances.yaml)."),
        click.option("--rel-l2", "rel_l2", type=float, callback=not_negative, help="Absolute rel_l2 threshold (0: bit-exact) for every dtype."),
        click.option("--no-localize", is_flag=True, help="Skip the replay of the first divergent module."),
        click.option("--allow-unmatched", is_flag=True, help="Entries present on one side only do not fail the run (still listed)."),
        report_options(FORMATS),
        top_option(25),
        wide_option,
        deprecated("--save-json", "save_json", metavar="FILE", use="--json-out", into="json_out"),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@click.group("parity", cls=_ParityGroup)
def parity() -> None:
    """Numerical parity of a model across devices, against the reference run and optionally a float64 golden.

    \b
    Examples:
      npuport parity --ref cuda --dev npu MODEL                  both devices on this host (same as `parity run`)
      npuport parity record --dev cuda MODEL --out-dir REF_DIR   record on the reference machine
      npuport parity compare MODEL --ref REF_DIR --dev npu       compare on the other machine
      npuport parity compare --ref REF_DIR --dev DEV_DIR         compare two records
      torchrun --nproc-per-node 8 $(which npuport) parity record --dev cuda MODEL --out-dir REF_DIR
                                                                 one part per rank; compare matches ranks or gathers
    Devices: cpu, cpu64, cuda[:i], npu[:i], cpu-fault:OP@MODULE[*SCALE]. Exit: 0 pass, 1 divergence, 2 error.
    """


def _checks(scenario: str, quiet: bool, model: str | None, hf_config: str | None) -> None:
    """What needs no model, before anything loads; then the first progress line."""
    parse_scenario(scenario)
    if model or hf_config:
        say(quiet, f"loading {model or hf_config}")


@parity.command("run", cls=Command, impl="npuport.cli.parity_impl:run_cmd")
@click.option("--ref", required=True, metavar="DEVICE|DIR", help="The baseline: a device (cuda) or a record directory.")
@click.option("--dev", required=True, metavar="DEVICE|DIR", help="The device under test (npu), or a record directory.")
@_report_options
@_model_options
@handle_errors
def run_cmd(scenario: str, model: str | None, hf_config: str | None, output: str | None, json_out: str | None,
            force: bool, quiet: bool, **_: Any) -> None:
    """Run MODEL on --ref and --dev (same weights, same inputs) and compare every submodule's outputs.

    \b
    Examples:
      npuport parity --ref cuda --dev npu examples/gpt/model.py
      npuport parity run --ref cuda --dev npu --hf config.json --scenario decode:past=256 --golden cpu64
      npuport parity --ref cuda --dev npu model.py --format html -o parity.html --json-out parity.json
    """
    check_new([output, json_out], force, inputs=[model, hf_config, _.get("ref"), _.get("dev"), _.get("golden")])
    _same_as_records(_.get("ref"), _.get("dev"), _.get("golden"))
    _checks(scenario, quiet, model, hf_config)


@parity.command("compare", cls=Command, impl="npuport.cli.parity_impl:compare_cmd")
@click.option("--ref", required=True, metavar="DIR", help="A record directory written by `npuport parity record`.")
@click.option("--dev", required=True, metavar="DEVICE|DIR", help="A device to run MODEL on now, or a second record directory.")
@click.option("--verify", type=click.Choice(["once", "always"]), default="once", show_default=True,
              help="Check each record file against its manifest's sha256 once per file on this machine (again when "
                   "the file changes), or on every compare.")
@_report_options
@_model_options
@handle_errors
def compare_cmd(scenario: str, model: str | None, hf_config: str | None, output: str | None, json_out: str | None,
                force: bool, quiet: bool, **_: Any) -> None:
    """Compare a record against MODEL run on --dev (the model is rebuilt with the record's weights and inputs).

    Per-rank records (made under torchrun) of one world size and layout are compared rank by rank; any other mix is
    gathered into whole tensors first. Under torchrun, MODEL runs on --dev on every rank.

    \b
    Examples:
      npuport parity compare model.py --ref REF_DIR --dev npu
      npuport parity compare --ref REF_DIR --dev DEV_DIR --format markdown -o parity.md
      torchrun --nproc-per-node 8 $(which npuport) parity compare model.py --ref REF_DIR --dev npu
    """
    check_new([output, json_out], force, inputs=[model, hf_config, _.get("ref"), _.get("dev"), _.get("golden")])
    _same_as_records(_.get("ref"), _.get("dev"), _.get("golden"))
    _checks(scenario, quiet, model, hf_config)


def _same_as_records(*sides: str | None) -> None:
    """A side that is a record runs (or was run with) the record's own step, seed and dtype: one of those options
    given here that names another was silently ignored; it is refused (npuport.parity.identity.check_asked). Only
    options given on the command line count: their defaults are not a request."""
    ctx = click.get_current_context()

    def given(name: str) -> Any:
        source = ctx.get_parameter_source(name)
        return ctx.params.get(name) if source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP) else None

    asked = {"scenario": given("scenario"), "seed": given("seed"), "dtype": given("dtype")}
    if all(v is None for v in asked.values()):
        return
    for side in sides:
        manifest = record_manifest(side) if side and Path(side).is_dir() else None
        if manifest is not None:  # not a readable record: loading it says what is wrong with it
            check_asked(manifest, str(side), **asked)


@parity.command("record", cls=Command, impl="npuport.cli.parity_impl:record_cmd")
@click.option("--dev", required=True, metavar="DEVICE", help="The device to record on (cuda, npu, cpu).")
@click.option("--out-dir", "out_dir", metavar="DIR", help="The record directory to create (required).")
@click.option("--force", is_flag=True, help="Replace an existing record directory.")
@click.option("--store-weights/--no-store-weights", default=None, help="Store the state dict (default: yes, no with --stats-only).")
@deprecated("-o", "--output", "output", metavar="DIR", use="--out-dir", into="out_dir", note="-o is always a file")
@_model_options
@handle_errors
def record_cmd(scenario: str, model: str | None, hf_config: str | None, out_dir: str | None, quiet: bool, **_: Any) -> None:
    """Record MODEL's captured step on --dev into the directory --out-dir (manifest.json + safetensors, written
    atomically). Under torchrun every rank writes its part (DIR/rank-NNNNN) and rank 0 the manifest naming them.

    \b
    Examples:
      npuport parity record --dev cuda examples/gpt/model.py --out-dir ref_gpt
      npuport parity record --dev cuda --hf config.json --stats-only --out-dir ref_llama
      torchrun --nproc-per-node 8 $(which npuport) parity record --dev cuda model.py --out-dir ref_tp8
    """
    if not out_dir:
        raise NpuportError("parity record needs the directory to create", "--out-dir DIR", "no --out-dir")
    check_out_dir(out_dir, "--out-dir", inputs=[model, hf_config])
    _checks(scenario, quiet, model, hf_config)
