"""What every command shares: user errors to exit 2 with one line, atomic output files, progress on stderr."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from npuport.errors import NpuportError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(fn: F) -> F:
    """NpuportError -> 'error: ...' on stderr and exit 2 (traceback only with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = kwargs.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except NpuportError as exc:
            if debug:
                traceback.print_exc()
            click.echo(f"error: {exc.render()}", err=True)
            raise click.exceptions.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def write_output(path: str, text: str, force: bool, protected: list[Path] | None = None) -> None:
    """Write atomically (temp file + rename); never replace an existing file unless --force, never an input."""
    target = Path(path)
    for p in protected or []:
        if target.resolve() == Path(p).resolve():
            raise NpuportError(f"refusing to write the report over an input file {target}", "an output path that is not one of the inputs", str(target))
    if target.exists() and not force:
        raise NpuportError(f"{target} already exists", "a new output path, or --force to replace it", str(target))
    if target.parent and not target.parent.exists():
        raise NpuportError(f"output folder {target.parent} does not exist", "an existing folder", str(target.parent))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent or "."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def progress_printer(enabled: bool) -> Callable[[str], None] | None:
    if not enabled:
        return None

    def say(msg: str) -> None:
        click.echo(f"npuport: {msg}", err=True)

    return say


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
