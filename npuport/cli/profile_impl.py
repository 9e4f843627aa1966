"""`npuport profile import`, the work (npuport.cli.profile declares the options): api.profile_import, the artifact
written as JSON, a one-line summary on stderr."""

from __future__ import annotations

import json
from pathlib import Path

from npuport import api
from npuport.cli.common import handle_errors, say, write_output
from npuport.render.fmt import fmt_time


@handle_errors
def import_trace(trace: str, output: str, force: bool, quiet: bool, debug: bool) -> None:
    art = api.profile_import(trace)
    write_output(output, json.dumps(art, indent=1) + "\n", force, protected=[Path(trace)])
    t = art["totals"]
    say(quiet, f"wrote {output}: {t['ops']} ops, {t['calls']} calls, {t['kernels']} kernels, "
               f"device time {fmt_time(t['device_s'])} ({art['device_time']}), {len(art['steps'])} step(s)")
