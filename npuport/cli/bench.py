"""`npuport bench`: parse options, run the benchmark, render it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from npuport.api import BenchOptions, BenchRun, BenchSource, ModelSpec
from npuport.api import bench as bench_api
from npuport.cli.common import handle_errors, progress_printer, write_output
from npuport.errors import NpuportError
from npuport.render.bench_text import render_text

_CANDIDATES = ("eager", "compile", "graph", "alt")


def _candidates(text: str) -> set[str] | None:
    if text == "auto":
        return None
    got = {t.strip() for t in text.split(",") if t.strip()}
    bad = got - set(_CANDIDATES)
    if bad:
        raise NpuportError(f"unknown candidate(s) {', '.join(sorted(bad))}", "a comma list of " + ", ".join(_CANDIDATES) + ", or auto", text)
    return got | {"eager"}


@click.command("bench")
@click.argument("model", required=False)
@click.option("--hf", "hf_config", metavar="CONFIG.json", help="A Hugging Face architecture from its config.json (random weights).")
@click.option("--from", "audit_json", metavar="AUDIT.json", help="Benchmark from an audit JSON alone (npuport audit --format json).")
@click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model.")
@click.option("--scenario", metavar="NAME[:batch=N,seq=N,past=N]", help="One scenario: train, prefill (default) or decode.")
@click.option("--top", type=int, help="Benchmark the N costliest ops of the scenario (default: its hot ops).")
@click.option("--shapes", default=3, show_default=True, help="Input shapes per op, costliest first.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda[:i] or npu[:i].")
@click.option("--chip", help="Roofline chip from mappings/hardware.yaml (default: detected from the device name).")
@click.option("--dtype", help="Model dtype for --hf builds.")
@click.option("--attn", default="auto", show_default=True, help="Attention implementation for --hf builds: auto (SDPA where the class has it), sdpa, eager.")
@click.option("--reps", default=50, show_default=True, help="Timed repetitions per candidate (at most).")
@click.option("--warmup", default=10, show_default=True, help="Untimed calls before timing.")
@click.option("--budget", "budget_s", default=0.5, show_default=True, help="Seconds of timed calls per candidate; slow ops get fewer reps (never under 5).")
@click.option("--rotate-mb", default=256, show_default=True, help="Rotate input sets until they span this many MiB (defeats cache reuse).")
@click.option("--candidates", "cands", default="auto", show_default=True, help="Comma list of eager, compile, graph, alt (registered alternatives); auto: all but graph (cpu: no compile).")
@click.option("--graph-below-us", default=20.0, show_default=True, help="With the graph candidate: capture only ops under this eager time.")
@click.option("--pin-cpu", type=int, metavar="CORE", help="Pin the launching thread to one CPU core.")
@click.option("--kernel-check/--no-kernel-check", default=True, show_default=True, help="Record kernel names under the profiler and check the expected path.")
@click.option("--e2e/--no-e2e", default=True, show_default=True, help="Time the whole step (model with random weights on the device) against the sum of its ops.")
@click.option("--e2e-ops", default="all", show_default=True, type=click.Choice(["all", "benched"]), help="Sum over every op of the step (timed eager) or only the benchmarked ones plus estimates.")
@click.option("--emit", metavar="DIR", help="Write one standalone repro script per benchmarked case into DIR.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE.")
@click.option("--json-out", metavar="FILE", help="Also write the JSON report to FILE.")
@click.option("--force", is_flag=True, help="Allow -o / --json-out to replace existing files.")
@click.option("--fail-on-kernel-path", is_flag=True, help="Exit 1 when an op did not take its expected kernel path.")
@click.option("--quiet", is_flag=True, help="No progress messages on stderr.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@handle_errors
def bench(model: str | None, hf_config: str | None, audit_json: str | None, entry: str | None, scenario: str | None,
          top: int | None, shapes: int, device: str, chip: str | None, dtype: str | None, attn: str, reps: int, warmup: int,
          budget_s: float, rotate_mb: int, cands: str, graph_below_us: float, pin_cpu: int | None, kernel_check: bool,
          e2e: bool, e2e_ops: str, emit: str | None, fmt: str, output: str | None, json_out: str | None, force: bool,
          fail_on_kernel_path: bool, quiet: bool, debug: bool) -> None:
    """Microbenchmark the audit's hot ops with their recorded shapes and dtypes on the current device: median
    and spread, achieved TFLOP/s or GB/s against the chip's roofline, the kernel each op ran, eager vs
    torch.compile vs registered alternatives, and the whole step against the sum of its ops.

    MODEL is a model.py (docs/model-files.md); or --hf CONFIG.json; or --from an audit JSON. Clocks and power
    settings are only read, never changed.
    """
    if reps < 1 or warmup < 0 or shapes < 1:
        raise NpuportError("bad repetition options", "--reps >= 1, --warmup >= 0, --shapes >= 1", f"--reps {reps} --warmup {warmup} --shapes {shapes}")
    for path in (output, json_out):
        if path and Path(path).exists() and not force:
            raise NpuportError(f"{path} already exists", "a new output path, or --force to replace it", path)
    chosen = _candidates(cands)
    opts = BenchOptions(warmup=warmup, reps=reps, budget_s=budget_s, rotate_bytes=rotate_mb << 20,
                        compile=None if chosen is None else "compile" in chosen,
                        graph=chosen is not None and "graph" in chosen, graph_below_s=graph_below_us * 1e-6,
                        alternatives=chosen is None or "alt" in chosen, kernel_check=kernel_check)
    rep, data = bench_api(BenchSource(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn), audit_json),
                BenchRun(scenario=scenario, top=top, shapes=shapes, device=device, chip=chip, options=opts, e2e=e2e,
                         e2e_ops=e2e_ops, emit=emit, pin_cpu=pin_cpu), progress=progress_printer(not quiet))

    text_json = json.dumps(data, indent=1, default=str) + "\n"
    if json_out:
        write_output(json_out, text_json, force)
    if fmt == "json":
        text = text_json
    else:
        console = Console(record=True, width=220 if not sys.stdout.isatty() else None, file=open("/dev/null", "w"))
        render_text(data, console)
        text = console.export_text(styles=sys.stdout.isatty())
    if output:
        write_output(output, text, force)
    else:
        sys.stdout.write(text)
    if fail_on_kernel_path and rep.kernel_path_failures:
        raise click.exceptions.Exit(1)
