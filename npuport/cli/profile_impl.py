"""`npuport profile import`, the work (npuport.cli.profile declares the options): api.profile_import, the artifact
written as JSON, a one-line summary on stderr."""

from __future__ import annotations

import json
from pathlib import Path

from npuport import api
from npuport.api import ModelSpec, RecordOptions
from npuport.cli.common import handle_errors, progress_printer, say, write_output
from npuport.render.fmt import fmt_time


@handle_errors
def import_trace(trace: str, output: str, force: bool, quiet: bool, debug: bool) -> None:
    art = api.profile_import(trace)
    write_output(output, json.dumps(art, indent=1) + "\n", force, protected=[Path(trace)])
    t = art["totals"]
    say(quiet, f"wrote {output}: {t['ops']} ops, {t['calls']} calls, {t['kernels']} kernels, "
               f"device time {fmt_time(t['device_s'])} ({art['device_time']}), {len(art['steps'])} step(s)")


@handle_errors
def record(model: str | None, hf_config: str | None, entry: str | None, scenarios: tuple[str, ...], dev: str,
           dtype: str | None, attn: str, warmup: int, steps: int, decode_cache: str, out_dir: str, force: bool,
           quiet: bool, debug: bool) -> None:
    done = api.profile_record(ModelSpec(model=model, hf_config=hf_config, entry=entry, dtype=dtype, attn=attn),
                              RecordOptions(scenarios=scenarios or ("prefill",), dev=dev, out_dir=out_dir,
                                            warmup=warmup, steps=steps, decode_cache=decode_cache),
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
