"""`npuport profile import`: a measured torch.profiler / Kineto trace into npuport's compact profile artifact
(docs/profile.md). Declares the options and help; the work (npuport.api.profile_import) is in
npuport.cli.profile_impl, imported only when a subcommand runs."""

from __future__ import annotations

from typing import Any

import click

from npuport.cli.common import check_new, handle_errors
from npuport.cli.lazy import Command, Group
from npuport.cli.options import quiet_debug


@click.group("profile", cls=Group)
def profile() -> None:
    """Measured profiles next to the estimate: import a trace, then `npuport audit ... --profile ART.json`.

    \b
    Examples:
      npuport profile import trace.json.gz -o gpt.profile.json
      npuport audit examples/gpt/model.py --scenario prefill:batch=1,seq=64 --profile gpt.profile.json
    """


@profile.command("import", cls=Command, impl="npuport.cli.profile_impl:import_trace")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("-o", "--output", metavar="FILE", required=True, help="Write the profile artifact (JSON) to FILE.")
@click.option("--force", is_flag=True, help="Allow -o to replace an existing file.")
@quiet_debug
@handle_errors
def import_trace(output: str, force: bool, **_: Any) -> None:
    """Read TRACE, a torch.profiler / Kineto Chrome trace (.json or .json.gz, streamed), and write per aten op its
    calls, host (self CPU) time, device kernel time and share, and per ProfilerStep the wall, kernel and idle time.
    A trace without kernels (a CPU run) uses CPU op time as its device time, marked device "cpu".

    \b
    Examples:
      npuport profile import trace.json.gz -o gpt.profile.json
      npuport profile import run/trace.json -o run.profile.json --force
    """
    check_new([output], force)
