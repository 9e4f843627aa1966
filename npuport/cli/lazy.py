"""Lazy loading, click's documented lazy-group pattern, so `npuport --help`, `npuport COMMAND --help` and a
command's first progress line come before torch is imported:

- `LazyGroup` (the `npuport` group) imports a command's module by name only when that command is asked for, and
  lists the commands from its own table (name, module, one-line summary) without importing any of them;
- `Command` (every npuport command) declares its options and help in a light module (click, npuport.cli.common,
  mappings data); its callback there runs first (cheap checks, the first progress line), then the module named by
  `impl` ("module:function": the work, which imports npuport.api and so torch) is imported by name and its
  function called with the same parameters.

These two `importlib.import_module` calls are the only imports made inside a function in npuport.cli; each names
its module in a table, so nothing is imported that the layer rules (tests/test_layering.py) have not seen.

Every class here reports click's own usage errors (unknown option, bad choice, missing argument) in the one
error style of npuport.cli.common ('error: ...', exit 2), and `Command` applies the deprecated spellings of
npuport.cli.options (a note on stderr, the value moved to the new option) before anything else runs.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import click

from npuport.cli.common import UsageError, as_usage_error, handle_errors
from npuport.cli.options import apply_deprecations


def _restyled(exc: click.ClickException) -> click.ClickException:
    if isinstance(exc, (UsageError, click.exceptions.NoArgsIsHelpError)):
        return exc
    return as_usage_error(exc)


class _OneErrorStyle(click.Command):
    """click's usage errors in npuport's error style (see npuport.cli.common.UsageError)."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as exc:
            raise _restyled(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _restyled(exc) from None


class Command(_OneErrorStyle):
    """A command whose work is the function `impl` ("module:function") names, imported only when it runs; the
    callback declared with the command's options runs first, with the same parameters."""

    def __init__(self, *args: Any, impl: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.impl = impl

    def invoke(self, ctx: click.Context) -> Any:
        try:
            handle_errors(apply_deprecations)(ctx, debug=bool(ctx.params.get("debug")))
            if self.callback is not None:
                ctx.invoke(self.callback, **ctx.params)
            module, _, name = self.impl.partition(":")
            work = getattr(importlib.import_module(module), name)
            return ctx.invoke(work, **ctx.params)
        except click.ClickException as exc:
            raise _restyled(exc) from None


class Group(_OneErrorStyle, click.Group):
    """A command group (parity, coverage, kernels) whose subcommands are `Command`s."""

    command_class = Command


class LazyGroup(Group):
    """The `npuport` group: each command's module is imported by name when the command is asked for."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        """`lazy`: command name -> ("module:attribute", the one-line summary `npuport --help` lists)."""
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    @staticmethod
    def _present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            return False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n, (target, _) in self.lazy.items() if self._present(target.partition(":")[0])] + \
            sorted(super().list_commands(ctx))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attr = self.lazy[cmd_name][0].partition(":")
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a real missing dependency inside the command is a bug: let it show
                raise
            return None  # a command module left out of this install: the others still work
        cmd = getattr(loaded, attr)
        assert isinstance(cmd, click.Command), f"{module}:{attr} is not a click command"
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with the summaries of the table, without importing their modules."""
        rows = [(n, self.lazy[n][1]) if n in self.lazy else (n, self.commands[n].get_short_help_str())
                for n in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
