"""`npuport migrate MODEL.py [--write]`: print (or apply) the mechanical CUDA -> NPU changes of a whole program as
one unified diff. Declares the options and help; the work (npuport.api migrate / write_migration) is in
npuport.cli.migrate_impl, imported only when the command runs."""

from __future__ import annotations

from typing import Any

import click

from npuport.cli.common import handle_errors
from npuport.cli.lazy import Command
from npuport.cli.options import quiet_debug
from npuport.errors import NpuportError


@click.command("migrate", cls=Command, impl="npuport.cli.migrate_impl:migrate")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--root", type=click.Path(file_okay=False), help="Paths in the diff are relative to this folder (default: the current one), so `git apply` works from it.")
@click.option("--no-follow", is_flag=True, help="Migrate MODEL alone, not the local modules it imports.")
@click.option("--write", is_flag=True, help="Apply the changes in place after copying each original to FILE.bak.")
@click.option("--force", is_flag=True, help="With --write: replace existing .bak files.")
@quiet_debug
@handle_errors
def migrate(**_: Any) -> None:
    """Rewrite what is mechanical in MODEL and the local modules it imports (device strings together with the
    tests that read them, .cuda(), nccl, torch.cuda.X with an NPU twin, import torch_npu); list everything else
    as diagnostics for a hand change, counted per file.

    The diff goes to stdout (paths relative to --root or the current folder: it applies with `git apply` or
    `patch -p1` there); the summary and the remaining diagnostics go to stderr. Exit 2 when MODEL is missing,
    not a .py file or does not parse; otherwise 0, also for a port left incomplete (strings held back, a local
    module that does not parse): the summary's last line ends "(none: ... all ported)" only when nothing is left.

    \b
    Examples:
      npuport migrate train.py > npu.patch && git apply npu.patch
      npuport migrate pretrain/tinyllama.py --root .      # follows lit_gpt/ through sys.path.append
      npuport migrate train.py --write                    # in place, originals kept as .bak
    """
    if _.get("force") and not _.get("write"):  # --force replaces .bak backups, which only --write makes
        raise NpuportError("--force without --write", "--write --force (to replace earlier .bak backups)", "--force")
