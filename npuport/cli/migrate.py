"""`npuport migrate MODEL.py [--write]`: print (or apply) the mechanical CUDA -> NPU changes as a unified diff."""

from __future__ import annotations

import click

from npuport.cli.common import handle_errors
from npuport.migrate import migrate_file, write_migration


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--write", is_flag=True, help="Apply the changes in place after copying the original to MODEL.bak.")
@click.option("--force", is_flag=True, help="With --write: replace an existing MODEL.bak.")
@click.option("--debug", is_flag=True, hidden=True)
@handle_errors
def migrate(model: str, write: bool, force: bool, debug: bool) -> None:
    """Rewrite what is mechanical (device strings in device positions, .cuda(), nccl, torch.cuda.X with an NPU
    twin, import torch_npu); list everything else as diagnostics for a hand change.

    The diff goes to stdout (it applies with `patch -p1` or `git apply`); the summary and the remaining
    diagnostics go to stderr. Exit 0 when done, 2 for a missing or unparsable file.
    """
    m = migrate_file(model)
    if write:
        backup = write_migration(m, force=force)
        click.echo(f"npuport: wrote {model} (original in {backup})" if backup else f"npuport: {model}: nothing to change", err=True)
    elif m.changed:
        click.echo(m.diff, nl=False)
    click.echo(f"npuport: {m.summary_line()}", err=True)
    for d in m.remaining:
        click.echo(f"{d.file}:{d.line}:{d.col}: {d.level}: {d.id} {d.message}", err=True)
