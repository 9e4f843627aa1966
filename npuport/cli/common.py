"""What every command shares: user errors to exit 2 with one line, atomic output files, progress on stderr, report
output (--format, -o, --json-out) and the width text reports are rendered at.

This module is light (click and npuport.errors only): `npuport --help`, `npuport COMMAND --help` and the first
progress line come before torch is imported.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

import click

from npuport.errors import NpuportError

if TYPE_CHECKING:  # rich loads with the report, not with --help
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])

# --format from -o's extension when --format is not given
EXTENSIONS = {".json": "json", ".md": "markdown", ".markdown": "markdown", ".csv": "csv", ".html": "html", ".htm": "html",
              ".txt": "text"}
# document and image formats a report might be asked for by name: refused, never written as text under that name
OTHER_FORMATS = {".pdf": "PDF", ".docx": "a Word document", ".doc": "a Word document", ".xlsx": "a spreadsheet",
                 ".xls": "a spreadsheet", ".pptx": "a presentation", ".png": "an image", ".jpg": "an image",
                 ".jpeg": "an image", ".svg": "an image", ".yaml": "YAML", ".yml": "YAML"}
PIPED_WIDTH = 120  # text reports written to a pipe or a file, unless $COLUMNS says otherwise
WIDE_WIDTH = 1000  # --wide: every column at its natural width, nothing folded


def error_line(message: str) -> None:
    """The one error style: a single line on stderr starting with 'error: '."""
    click.echo(f"error: {message}", err=True)


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
            error_line(exc.render())
            raise click.exceptions.Exit(2) from None

    return wrapper  # type: ignore[return-value]


class UsageError(click.ClickException):
    """A usage error click found while parsing (unknown option, bad choice, missing argument), shown in the one
    error style instead of click's 'Usage: ... Error: ...' block; exit 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        error_line(self.format_message())


def as_usage_error(exc: click.ClickException) -> UsageError:
    """click's message with its first letter lowered, and where to read the command's options."""
    msg = " ".join(exc.format_message().split()).rstrip(".")  # one line
    if len(msg) > 1 and msg[0].isupper() and msg[1].islower():
        msg = msg[0].lower() + msg[1:]
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        msg += f" (see '{ctx.command_path} --help')"
    return UsageError(msg)


def write_output(path: str, text: str, force: bool, protected: list[Path] | None = None) -> None:
    """Write atomically (temp file + rename); never replace an existing file unless --force, never an input."""
    target = Path(path)
    _not_an_input(target, [str(p) for p in protected or []])
    if target.is_dir():
        raise NpuportError(f"{target} is a folder", "a file path for the report", str(target))
    _regular(target)
    if os.path.lexists(target) and not force:
        raise NpuportError(f"{target} already exists", "a new output path, or --force to replace it", str(target))
    if target.parent and not target.parent.exists():
        raise NpuportError(f"output folder {target.parent} does not exist", "an existing folder", str(target.parent))
    if target.is_symlink() and target.exists():  # --force over a link: the file it names is replaced, the link kept
        target = target.resolve()
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


def check_new(paths: list[str | None], force: bool, inputs: list[str | None] | tuple[str | None, ...] = ()) -> None:
    """Fail before a long run, not after it, on an output path the report could not or must not be written to: one
    that exists without --force (a dangling link too), a folder, one in a folder that does not exist, the same path
    given twice (-o and --json-out), or one of the inputs or a path inside an input folder (a record, a profile)."""
    seen: set[str] = set()
    for path in paths:
        if path is None:
            continue
        if not path.strip():
            raise NpuportError("an output path is empty", "a file name", repr(path))
        if path.endswith(("/", os.sep)):  # `-o out/` names a folder; writing a file called `out` is not what was asked
            raise NpuportError(f"{path} names a folder", "a file path for the report", path)
        target = Path(path)
        try:
            key = str(target.resolve())  # through links: two names of one file are one output
        except (OSError, RuntimeError):
            key = os.path.abspath(path)
        if key in seen:
            raise NpuportError(f"{path} is given as two outputs", "a different file for each (-o, --json-out)", path)
        seen.add(key)
        _not_an_input(target, [str(p) for p in inputs if p])
        if target.is_dir():
            raise NpuportError(f"{path} is a folder", "a file path for the report", path)
        _regular(target)
        if os.path.lexists(target) and not force:
            raise NpuportError(f"{path} already exists", "a new output path, or --force to replace it", path)
        parent = target.parent
        if not parent.exists():
            raise NpuportError(f"output folder {parent} does not exist", "an existing folder", str(parent))
        if not parent.is_dir():
            raise NpuportError(f"{parent} is not a folder", "an existing folder for the report", str(parent))


_SYSTEM = ("/dev/", "/proc/", "/sys/")  # device and process paths: -o /dev/stdout is stdout, which -o left out gives


def _regular(target: Path) -> None:
    """A report replaces a file by renaming a new one over it: never a device, a pipe or a process's descriptor (as
    root, -o /dev/stdout --force swapped the system's link for a file), nor whatever a link names that is not a
    file."""
    if os.path.abspath(target).startswith(_SYSTEM) or target.exists() and not target.is_file():
        raise NpuportError(f"{target} is not a regular file (a device or a pipe)", "a file path for the report "
                           "(leave -o out to write to stdout)", str(target))


def _not_an_input(target: Path, inputs: list[str]) -> None:
    """The report never replaces what the command reads: an input file (through a link too) or anything inside an
    input folder (a parity record, an Ascend profiler folder)."""
    try:
        where = target.resolve()
    except (OSError, RuntimeError):  # a link that loops: it names no input; the existence check decides
        return
    for given in inputs:
        src = Path(given)
        if not src.exists() and ":" in given and given.rsplit(":", 1)[0].endswith(".py"):  # model.py:function
            src = Path(given.rsplit(":", 1)[0])
        if not src.exists():
            continue  # a device name (cuda, npu:0), or an input another check reports
        try:
            real = src.resolve()
        except (OSError, RuntimeError):
            continue
        if where == real:
            raise NpuportError(f"refusing to write the report over an input file {target}",
                               "an output path that is not one of the inputs", str(target))
        if src.is_dir() and where.is_relative_to(real):
            raise NpuportError(f"refusing to write the report inside the input folder {src}",
                               "an output path outside the inputs", str(target))


def check_absent(paths: list[str], force: bool, inputs: list[str | None] | tuple[str | None, ...] = ()) -> None:
    """Files and folders a command will make inside its own --out-dir (created if missing): none may be an input, and
    none may exist yet unless --force (the command's own checks then say what it may replace)."""
    for path in paths:
        _not_an_input(Path(path), [str(p) for p in inputs if p])
        if os.path.lexists(path) and not force:
            raise NpuportError(f"{path} already exists", "a new output path, or --force to replace it", path)


def check_out_dir(path: str | None, what: str, inputs: list[str | None] | tuple[str | None, ...] = ()) -> None:
    """A folder the command creates or fills (--out-dir, --emit), checked before any work: neither it nor a folder
    above it is a file, and it holds none of the inputs (a record replaced with --force is deleted whole)."""
    if not path:
        return
    folder = Path(path)
    if os.path.lexists(folder) and not folder.is_dir():
        kind = "a link to nothing" if folder.is_symlink() and not folder.exists() else "a file"
        raise NpuportError(f"{what} {path} is {kind}", "a folder to create, or one this command wrote before", path)
    above = next((p for p in folder.absolute().parents if os.path.lexists(p)), None)
    if above is not None and not above.is_dir():
        raise NpuportError(f"{what} {path} lies under {above}, a file", "a folder to create", path)
    if folder.is_dir():
        real = folder.resolve()
        for given in inputs:
            src = Path(given) if given else None
            if src is not None and not src.exists() and ":" in str(given) and str(given).rsplit(":", 1)[0].endswith(".py"):
                src = Path(str(given).rsplit(":", 1)[0])
            if src is not None and src.exists() and src.resolve().is_relative_to(real):
                raise NpuportError(f"{what} {path} holds an input, {given}", "a folder apart from the model and its "
                                   "config (what the command writes there may replace it)", path)


def pick_format(fmt: str | None, output: str | None, formats: tuple[str, ...]) -> str:
    """--format, else from -o's extension (when the command writes that format), else text."""
    if fmt:
        return fmt
    suffix = Path(output).suffix.lower() if output else ""
    if suffix in OTHER_FORMATS:  # a report written as text under a .pdf name would not open as one
        raise NpuportError(f"{output}: its extension asks for {OTHER_FORMATS[suffix]}, which npuport does not write",
                           "an extension of " + ", ".join(e for e, f in EXTENSIONS.items() if f in formats)
                           + " (or --format)", str(output))
    guessed = EXTENSIONS.get(suffix, "text")
    if guessed not in formats:  # x.html from a command without HTML: a text file named .html would mislead
        raise NpuportError(f"{output}: its extension asks for {guessed}, which this command does not write",
                           "an extension of " + ", ".join(e for e, f in EXTENSIONS.items() if f in formats)
                           + " (or --format)", str(output))
    return guessed


def as_json(data: Any) -> str:
    return json.dumps(data, indent=1, allow_nan=False, default=str) + "\n"


def emit(text: str, output: str | None, force: bool, quiet: bool, fmt: str, json_text: str | None = None,
         json_out: str | None = None, protected: list[Path] | None = None) -> None:
    """The report to -o FILE (else stdout) and, with --json-out FILE, its JSON form as well."""
    if json_out and json_text is not None:
        write_output(json_out, json_text, force, protected=protected)
        say(quiet, f"wrote the JSON report to {json_out}")
    if output:
        write_output(output, text, force, protected=protected)
        say(quiet, f"wrote {fmt} report to {output}")
    else:
        sys.stdout.write(text)


def say(quiet: bool, msg: str) -> None:
    """One progress or status line on stderr, 'npuport: ...'; nothing with --quiet."""
    if not quiet:
        click.echo(f"npuport: {msg}", err=True)


def progress_printer(enabled: bool) -> Callable[[str], None] | None:
    if not enabled:
        return None

    live = {"open": False}  # a transient line is on screen

    def progress(msg: str) -> None:
        """Lines starting with "~" are transient (an op count): redrawn in place on a terminal, dropped elsewhere."""
        if msg.startswith("~"):
            if sys.stderr.isatty():
                click.echo(f"\rnpuport: {msg[1:]}\x1b[K", err=True, nl=False)
                live["open"] = True
            return
        if live["open"]:
            click.echo("\r\x1b[K", err=True, nl=False)
            live["open"] = False
        click.echo(f"npuport: {msg}", err=True)

    return progress


@contextlib.contextmanager
def quiet_stderr(quiet: bool) -> Iterator[None]:
    """With --quiet nothing reaches stderr but an error: Python warnings and library log records are dropped."""
    if not quiet:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)


def to_terminal(output: str | None) -> bool:
    """The report goes to a terminal (not -o FILE, not a pipe): colours and the terminal's width."""
    return output is None and sys.stdout.isatty()


def text_width(wide: bool, output: str | None = None, piped: int = PIPED_WIDTH) -> int:
    """Columns a text report is rendered at: --wide: every column at its natural width; a terminal: its width;
    piped or written to a file (-o): $COLUMNS, else `piped` (120; wider for a report whose renderer does not yet
    choose its columns by width)."""
    if wide:
        return WIDE_WIDTH
    if to_terminal(output):
        return shutil.get_terminal_size().columns
    env = os.environ.get("COLUMNS", "")
    return int(env) if env.isdigit() and int(env) > 0 else piped


def export_text(console: Console, output: str | None) -> str:
    """A recorded console's text: colours only for a terminal; trailing blanks dropped from a file or pipe."""
    if to_terminal(output):
        return console.export_text(styles=True)
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
