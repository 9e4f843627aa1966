"""`npuport migrate MODEL.py [--write]`: print (or apply) the mechanical CUDA -> NPU changes of a whole program as
one unified diff."""

from __future__ import annotations

import click

from npuport.api import MigrateOptions, write_migration
from npuport.api import migrate as migrate_api
from npuport.cli.common import handle_errors


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--root", type=click.Path(file_okay=False), help="Paths in the diff are relative to this folder (default: the current one), so `git apply` works from it.")
@click.option("--no-follow", is_flag=True, help="Migrate MODEL alone, not the local modules it imports.")
@click.option("--write", is_flag=True, help="Apply the changes in place after copying each original to FILE.bak.")
@click.option("--force", is_flag=True, help="With --write: replace existing .bak files.")
@click.option("--quiet", is_flag=True, help="Only the diff (and errors): no summary or diagnostics on stderr.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@handle_errors
def migrate(model: str, root: str | None, no_follow: bool, write: bool, force: bool, quiet: bool, debug: bool) -> None:
    """Rewrite what is mechanical in MODEL and the local modules it imports (device strings together with the
    tests that read them, .cuda(), nccl, torch.cuda.X with an NPU twin, import torch_npu); list everything else
    as diagnostics for a hand change, counted per file.

    The diff goes to stdout (paths relative to --root or the current folder: it applies with `git apply` or
    `patch -p1` there); the summary and the remaining diagnostics go to stderr. Exit 0 when done, 2 for a
    missing or unparsable file.

    \b
    Examples:
      npuport migrate train.py > npu.patch && git apply npu.patch
      npuport migrate pretrain/tinyllama.py --root .      # follows lit_gpt/ through sys.path.append
      npuport migrate train.py --write                    # in place, originals kept as .bak
    """
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
