"""Walk every npuport command and subcommand through click's introspection (shared by the CLI tests)."""

from __future__ import annotations

from typing import Iterator

import click

from npuport.cli.main import cli
from npuport.cli.options import DeprecatedOption


def walk(cmd: click.Command = cli, path: tuple[str, ...] = ("npuport",)) -> Iterator[tuple[str, click.Command]]:
    """('npuport parity run', command) for the root, every group and every command under it."""
    yield " ".join(path), cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd, info_name=path[-1])
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, f"{' '.join(path)} lists {name} but cannot load it"
            yield from walk(sub, (*path, name))


def commands() -> list[tuple[str, click.Command]]:
    """Every command that runs something (not a group)."""
    return [(p, c) for p, c in walk() if not isinstance(c, click.Group)]


def options(cmd: click.Command, deprecated: bool = False) -> list[click.Option]:
    """The command's options; its deprecated spellings only when asked."""
    return [p for p in cmd.params if isinstance(p, click.Option) and isinstance(p, DeprecatedOption) == deprecated]


def option(cmd: click.Command, flag: str) -> click.Option | None:
    return next((p for p in options(cmd) if flag in p.opts), None)
