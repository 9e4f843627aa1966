"""`npuport profile import`, the work (npuport.cli.profile declares the options): api.profile_import, the artifact
written as JSON, a one-line summary on stderr."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

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
from npuport.profile.kernel_classes import of_artifact
from npuport.render.fmt import fmt_time
from npuport.render.profile_compare import render_csv, render_html, render_markdown, render_text


@handle_errors
def import_trace(trace: str, output: str, force: bool, quiet: bool, debug: bool) -> None:
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
    done = api.profile_record(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn),
                              RecordOptions(scenarios=scenarios or ("prefill",), dev=dev, out_dir=out_dir,
                                            warmup=warmup, steps=steps, timed_steps=timed_steps,
                                            decode_cache=decode_cache),
                              progress=progress_printer(not quiet))
    for rec in done:
        path = Path(out_dir) / f"{rec.scenario.name}.profile.json"
        write_output(str(path), json.dumps(rec.artifact, indent=1) + "\n", force)
        steps_ = rec.artifact["steps"]
        wall = sum(s["wall_s"] for s in steps_) / max(len(steps_), 1)
        kern = sum(s["kernel_s"] for s in steps_) / max(len(steps_), 1)
        say(quiet, f"wrote {path} and {rec.trace_path.name}: {rec.scenario.spec()}, step {fmt_time(wall)} wall, "
                   f"{fmt_time(kern)} {'kernels' if rec.artifact['device'] != 'cpu' else 'busy'} "
                   f"(mean of {len(steps_)})")


@handle_errors
def compare(base: str, new: str, audit_json: str | None, fmt: str | None, output: str | None, json_out: str | None,
            force: bool, top: int, wide: bool, quiet: bool, debug: bool) -> None:
    fmt = pick_format(fmt, output, ("text", "json", "markdown", "csv", "html"))
    data: dict[str, Any] = api.profile_compare(base, new, audit_json)
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
