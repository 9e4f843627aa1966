"""`npuport bench`, the work (npuport.cli.bench declares the options): flags -> api.BenchSource + api.BenchRun,
api.bench, rendered with npuport.render."""

from __future__ import annotations

import io
import json

import click
from rich.console import Console

from npuport.api import BenchOptions, BenchRun, BenchSource, ModelSpec
from npuport.api import bench as bench_api
from npuport.cli.bench import FORMATS, candidates
from npuport.cli.common import emit, export_text, handle_errors, pick_format, progress_printer, quiet_stderr, text_width
from npuport.render.bench_text import render_text


@handle_errors
def bench(model: str | None, hf_config: str | None, audit_json: str | None, entry: str | None, scenario: str | None,
          ops: int | None, shapes: int, device: str, chip: str | None, dtype: str | None, attn: str, reps: int, warmup: int,
          budget_s: float, rotate_mb: int, cands: str, graph_below_us: float, pin_cpu: int | None, kernel_check: bool,
          e2e: bool, e2e_ops: str, emit_dir: str | None, fmt: str | None, output: str | None, json_out: str | None,
          force: bool, wide: bool, fail_on_kernel_path: bool, quiet: bool, debug: bool) -> None:
    fmt = pick_format(fmt, output, FORMATS)
    chosen = candidates(cands)
    opts = BenchOptions(warmup=warmup, reps=reps, budget_s=budget_s, rotate_bytes=rotate_mb << 20,
                        compile=None if chosen is None else "compile" in chosen,
                        graph=chosen is not None and "graph" in chosen, graph_below_s=graph_below_us * 1e-6,
                        alternatives=chosen is None or "alt" in chosen, kernel_check=kernel_check, debug=debug)
    with quiet_stderr(quiet):
        rep, data = bench_api(BenchSource(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn), audit_json),
                              BenchRun(scenario=scenario, top=ops, shapes=shapes, device=device, chip=chip, options=opts, e2e=e2e,
                                       e2e_ops=e2e_ops, emit=emit_dir, pin_cpu=pin_cpu), progress=progress_printer(not quiet))
    text_json = json.dumps(data, indent=1, default=str) + "\n"
    if fmt == "json":
        text = text_json
    else:
        console = Console(record=True, width=text_width(wide, output), file=io.StringIO())
        render_text(data, console, wide=wide)
        text = export_text(console, output)
    emit(text, output, force, quiet, fmt, json_text=text_json, json_out=json_out)
    if fail_on_kernel_path and rep.kernel_path_failures:
        raise click.exceptions.Exit(1)
