"""`npuport parity`: cross-device numerical parity. Parses options, calls npuport.api (parity_run / parity_compare /
parity_record), renders the npuport.parity/1 JSON form with npuport.render.

    npuport parity --ref cuda --dev npu MODEL                 both devices on this host
    npuport parity record --dev cuda MODEL -o REF_DIR         on the reference machine
    npuport parity compare MODEL --ref REF_DIR --dev npu      on the other machine
    npuport parity compare --ref REF_DIR --dev DEV_DIR        two records

Exit codes: 0 parity holds, 1 divergence, 2 usage or input error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from npuport.api import ModelSpec, ParityOptions, parity_compare, parity_record, parity_run
from npuport.cli.common import handle_errors, progress_printer, write_output
from npuport.errors import NpuportError
from npuport.render.parity_doc import render_html, render_markdown
from npuport.render.parity_text import render_text

FORMATS = ("text", "json", "markdown", "html")
_EXT = {".json": "json", ".md": "markdown", ".html": "html", ".htm": "html", ".txt": "text"}


class _ParityGroup(click.Group):
    """`npuport parity [OPTIONS] MODEL` without a subcommand name means `npuport parity run ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.argument("model", required=False),
        click.option("--hf", "hf_config", metavar="CONFIG.json", help="A Hugging Face architecture from its config.json (random seeded weights)."),
        click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model."),
        click.option("--dtype", help="Model dtype (float32, float16, bfloat16; default: the config's / the model's)."),
        click.option("--attn", default="auto", show_default=True, help="Attention implementation for --hf builds: auto (SDPA where the class has it), sdpa, eager."),
        click.option("--scenario", default="prefill:batch=1,seq=128", show_default=True, metavar="NAME[:batch=N,seq=N]",
                     help="train (forward + backward), prefill or decode."),
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
        click.option("--quiet", is_flag=True, help="No progress messages on stderr."),
        click.option("--debug", is_flag=True, help="Show tracebacks for errors."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _report_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--golden", metavar="cpu64|DIR", help="A float64 golden: cpu64 runs the model on the CPU in float64; the verdict becomes relative."),
        click.option("--k", "k", type=float, help="Relative verdict factor for every dtype (default: per dtype in mappings/tolerances.yaml)."),
        click.option("--rel-l2", "rel_l2", type=float, help="Absolute rel_l2 threshold for every dtype."),
        click.option("--no-localize", is_flag=True, help="Skip the replay of the first divergent module."),
        click.option("--allow-unmatched", is_flag=True, help="Entries present on one side only do not fail the run (still listed)."),
        click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format (default: from -o's extension, else text)."),
        click.option("-o", "--output", metavar="FILE", help="Write the report to FILE."),
        click.option("--force", is_flag=True, help="Allow -o to replace an existing file."),
        click.option("--save-json", metavar="FILE", help="Also write the JSON report to FILE (whatever --format is)."),
        click.option("--top", default=25, show_default=True, help="Rows in the text table (0: all)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@click.group("parity", cls=_ParityGroup)
def parity() -> None:
    """Numerical parity of a model across devices, against the reference run and optionally a float64 golden.

    \b
    npuport parity --ref cuda --dev npu MODEL             both devices on this host (same as `parity run`)
    npuport parity record --dev cuda MODEL -o REF_DIR     record on the reference machine
    npuport parity compare MODEL --ref REF_DIR --dev npu  compare on the other machine
    npuport parity compare --ref REF_DIR --dev DEV_DIR    compare two records
    Devices: cpu, cpu64, cuda[:i], npu[:i], cpu-fault:OP@MODULE[*SCALE]. Exit: 0 pass, 1 divergence, 2 error.
    """


def _spec(kw: dict[str, Any]) -> ModelSpec:
    return ModelSpec(model=kw["model"], hf_config=kw["hf_config"], entry=kw["entry"], dtype=kw["dtype"], attn=kw["attn"])


def _options(kw: dict[str, Any], **extra: Any) -> ParityOptions:
    return ParityOptions(scenario=kw["scenario"], seed=kw["seed"], stats_only=kw["stats_only"], ops=kw["ops"],
                         op_sequence=kw["op_sequence"], backward=kw["backward"], keep=tuple(kw["keep"]),
                         stats_budget_mib=kw["stats_budget"], allow_tf32=kw["allow_tf32"],
                         deterministic=not kw["no_deterministic"], train_mode=kw["train_mode"], **extra)


def _compare(ref: str, dev: str, kw: dict[str, Any], run: Callable[..., Any] = parity_run) -> None:
    fmt = kw["fmt"] or (_EXT.get(Path(kw["output"]).suffix.lower(), "text") if kw["output"] else "text")
    if kw["output"] and Path(kw["output"]).exists() and not kw["force"]:
        raise NpuportError(f"{kw['output']} already exists", "a new output path, or --force to replace it", kw["output"])
    opts = _options(kw, golden=kw["golden"], k=kw["k"], rel_l2=kw["rel_l2"], localize=not kw["no_localize"],
                    allow_unmatched=kw["allow_unmatched"])
    result, data = run(ref, dev, _spec(kw), opts, progress=progress_printer(not kw["quiet"]))

    if fmt == "json":
        text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    elif fmt == "markdown":
        text = render_markdown(data)
    elif fmt == "html":
        text = render_html(data)
    else:
        text = render_text(data, top=kw["top"])
    if kw["save_json"]:
        write_output(kw["save_json"], json.dumps(data, indent=1, allow_nan=False) + "\n", kw["force"])
    if kw["output"]:
        write_output(kw["output"], text, kw["force"])
        if not kw["quiet"]:
            click.echo(f"npuport: wrote {fmt} report to {kw['output']}", err=True)
            click.echo(data["verdict"]["text"], err=True)
    else:
        sys.stdout.write(text)
    if not result:
        raise click.exceptions.Exit(1)


@parity.command("run")
@click.option("--ref", required=True, metavar="DEVICE|DIR", help="The baseline: a device (cuda) or a record directory.")
@click.option("--dev", required=True, metavar="DEVICE|DIR", help="The device under test (npu), or a record directory.")
@_report_options
@_model_options
@handle_errors
def run_cmd(ref: str, dev: str, **kw: Any) -> None:
    """Run MODEL on --ref and --dev (same weights, same inputs) and compare every submodule's outputs."""
    _compare(ref, dev, kw)


@parity.command("compare")
@click.option("--ref", required=True, metavar="DIR", help="A record directory written by `npuport parity record`.")
@click.option("--dev", required=True, metavar="DEVICE|DIR", help="A device to run MODEL on now, or a second record directory.")
@_report_options
@_model_options
@handle_errors
def compare_cmd(ref: str, dev: str, **kw: Any) -> None:
    """Compare a record against MODEL run on --dev (the model is rebuilt with the record's weights and inputs)."""
    _compare(ref, dev, kw, parity_compare)


@parity.command("record")
@click.option("--dev", required=True, metavar="DEVICE", help="The device to record on (cuda, npu, cpu).")
@click.option("-o", "--output", required=True, metavar="REF_DIR", help="The artifact directory to create.")
@click.option("--force", is_flag=True, help="Replace an existing artifact directory.")
@click.option("--store-weights/--no-store-weights", default=None, help="Store the state dict (default: yes, no with --stats-only).")
@_model_options
@handle_errors
def record_cmd(dev: str, output: str, force: bool, store_weights: bool | None, **kw: Any) -> None:
    """Record MODEL's captured step on --dev into REF_DIR (manifest.json + safetensors, written atomically)."""
    path = parity_record(_spec(kw), dev, output, _options(kw, store_weights=store_weights), force=force,
                         progress=progress_printer(not kw["quiet"]))
    if not kw["quiet"]:
        size = sum(p.stat().st_size for p in Path(path).iterdir())
        click.echo(f"npuport: recorded {path} ({size / 2**20:.1f} MiB)", err=True)
