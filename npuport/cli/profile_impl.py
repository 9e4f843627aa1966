"""`npuport profile import`, the work (npuport.cli.profile declares the options): api.profile_import, the artifact
written as JSON, a one-line summary on stderr."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from npuport import api
from npuport.api import ModelSpec, RecordOptions
from npuport.cli.common import (
    as_json,
    emit,
    export_text,
    handle_errors,
    pick_format,
    progress_printer,
    say,
    text_width,
    write_output,
)
from npuport.errors import NpuportError
from npuport.profile.kernel_classes import of_artifact
from npuport.profile.record import Recorded
from npuport.render.fmt import fmt_time
from npuport.render.profile_compare import render_csv, render_html, render_markdown, render_text


@handle_errors
def import_trace(trace: str, output: str, force: bool, quiet: bool, debug: bool) -> None:
    if Path(output).suffix.lower() not in (".json", ""):  # the artifact is JSON whatever the name says (docs/cli.md)
        raise NpuportError(f"profile import writes a JSON artifact, not {Path(output).suffix}", "-o FILE.json",
                           output)
    art = api.profile_import(trace)
    write_output(output, json.dumps(art, indent=1) + "\n", force, protected=[Path(trace)])
    t = art["totals"]
    classes = of_artifact(art) or {}
    kernel_s = sum(c["device_s"] for c in classes.values())
    # the three kinds of kernel that took the most time (mappings/kernel_classes.yaml): what the trace is made of
    top = sorted(classes.items(), key=lambda kv: -kv[1]["device_s"])[:3]
    by_class = ("; kernel time by class: " + ", ".join(f"{c} {v['device_s'] / kernel_s:.0%}" for c, v in top)
                if kernel_s > 0 else "")
    say(quiet, f"wrote {output}: {t['ops']} ops, {t['calls']} calls, {t['kernels']} kernels, "
               f"device time {fmt_time(t['device_s'])} ({art['device_time']}), {len(art['steps'])} step(s){by_class}")


@handle_errors
def record(model: str | None, hf_config: str | None, entry: str | None, scenarios: tuple[str, ...], dev: str,
           dtype: str | None, attn: str, warmup: int, steps: int, timed_steps: int, decode_cache: str, out_dir: str,
           force: bool, quiet: bool, debug: bool) -> None:
    made = not Path(out_dir).exists()

    def write(rec: Recorded) -> None:  # as each scenario ends: a later failure keeps it whole
        path = Path(out_dir) / f"{rec.scenario.name}.profile.json"
        write_output(str(path), json.dumps(rec.artifact, indent=1) + "\n", force)
        art = rec.artifact
        steps_ = art["steps"]
        kern = sum(s["kernel_s"] for s in steps_) / max(len(steps_), 1)
        # the step as `profile compare` and `audit --profile` read it: the median of the steps run without the profiler
        say(quiet, f"wrote {path} and {rec.trace_path.name}: {rec.scenario.spec()}, step "
                   f"{fmt_time(art['unprofiled']['median_s'])} wall (median of {len(art['unprofiled']['step_s'])} "
                   f"unprofiled), {fmt_time(kern)} {'kernels' if art['device'] != 'cpu' else 'busy'} per profiled step")

    try:
        api.profile_record(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn),
                           RecordOptions(scenarios=scenarios or ("prefill",), dev=dev, out_dir=out_dir, warmup=warmup,
                                         steps=steps, timed_steps=timed_steps, decode_cache=decode_cache),
                           progress=progress_printer(not quiet), on_recorded=write)
    except BaseException:
        out = Path(out_dir)
        if made and out.is_dir() and not any(out.iterdir()):  # nothing recorded: no empty folder left behind
            out.rmdir()
        raise


@handle_errors
def compare(base: str, new: str, audit_json: str | None, fmt: str | None, output: str | None, json_out: str | None,
            force: bool, top: int, wide: bool, quiet: bool, debug: bool) -> None:
    fmt = pick_format(fmt, output, ("text", "json", "markdown", "csv", "html"))
    data: dict[str, Any] = api.profile_compare(base, new, audit_json)
    if fmt != "text":  # the text report says them first; the other formats carry them, and stderr says them too
        for note in data.get("notes") or []:
            say(quiet, f"note: {note}")
    text_json = as_json(data)
    if fmt == "json":
        text = text_json
    elif fmt == "markdown":
        text = render_markdown(data)
    elif fmt == "csv":
        text = render_csv(data)
    elif fmt == "html":
        text = render_html(data)
    else:
        console = Console(record=True, width=text_width(wide, output), file=io.StringIO())
        render_text(data, console, top, wide=wide)
        text = export_text(console, output)
    emit(text, output, force, quiet, fmt, json_text=text_json, json_out=json_out,
         protected=[Path(p) for p in (base, new, audit_json) if p])


@handle_errors
def probe(dev: str, rounds: int, quiet: bool, debug: bool) -> None:
    seconds, where = api.host_probe(dev, rounds)
    click.echo(f"host probe on {where}: {seconds * 1e6:.1f} us per tiny eager op (median of {rounds} probes of 300 adds)")
    say(quiet, api.host_probe_advice(seconds, where))
