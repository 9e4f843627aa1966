"""`npuport migrate`, the work (npuport.cli.migrate declares the options): api.migrate, then the diff on stdout (or
api.write_migration with --write) and the summary and remaining diagnostics on stderr."""

from __future__ import annotations

from pathlib import Path

import click

from npuport.api import MigrateOptions, write_migration
from npuport.api import migrate as migrate_api
from npuport.cli.common import handle_errors
from npuport.errors import NpuportError


@handle_errors
def migrate(model: str, root: str | None, no_follow: bool, write: bool, force: bool, quiet: bool, debug: bool) -> None:
    if root is not None:
        _check_root(root, model)
    program = migrate_api(model, MigrateOptions(root=root, follow=not no_follow))
    if write:
        written = write_migration(program, force=force)
        if not quiet:
            for display, backup in written:
                click.echo(f"npuport: wrote {display} (original in {backup.name})", err=True)
        if not written and not quiet:
            click.echo(f"npuport: {model}: nothing to change", err=True)
    elif program.diff:
        click.echo(program.diff, nl=False)
    if quiet:
        return
    for line in program.summary_lines():
        click.echo(f"npuport: {line}", err=True)
    for note in program.notes:
        click.echo(f"npuport: note: {note}", err=True)
    for d in program.remaining:
        click.echo(f"{d.file}:{d.line}:{d.col}: {d.level}: {d.id} {d.message}", err=True)


def _check_root(root: str, model: str) -> None:
    """--root is where `git apply` runs: it must exist and hold the program, or the diff's paths climb out of it
    (a/../../x.py) and apply nowhere."""
    base = Path(root)
    if not base.is_dir():
        raise NpuportError(f"--root {root} is not a folder", "the folder the diff is applied from (it holds MODEL)", root)
    entry = Path(model.split(":")[0] if not Path(model).exists() else model)
    if entry.exists() and not entry.resolve().is_relative_to(base.resolve()):
        raise NpuportError(f"--root {root} does not hold {model}", "a folder above MODEL, from which `git apply` runs",
                           str(base.resolve()))

