"""`npuport coverage show|diff|list`: torch_npu coverage of aten overloads, from mappings/coverage/. Declares the
options and help; the work (npuport.api coverage_show / coverage_diff / coverage_list) is in
npuport.cli.coverage_impl, imported only when a subcommand runs."""

from __future__ import annotations

from typing import Any

import click

from npuport.cli.common import check_new, handle_errors
from npuport.cli.lazy import Command, Group
from npuport.cli.options import quiet_debug, report_options, torch_npu_option
from npuport.coverage import STATUSES, available_versions
from npuport.coverage.database import published_versions

FORMATS = ("text", "json")
# `view`: no kernel (aten::view, aten::t, aten::size ...); the CLI gives it until resolve.py does (coverage_impl)
LIST_STATUSES = tuple(dict.fromkeys((*STATUSES, "view")))


@click.group("coverage", cls=Group)
def coverage() -> None:
    """Which aten overloads each torch_npu release runs natively, decomposes, falls back to the CPU, or fails.

    \b
    Examples:
      npuport coverage show aten::mm
      npuport coverage diff 2.1.0.post10 2.14.0 --format json -o changes.json
      npuport coverage list --status cpu-fallback --torch-npu 2.3.1
    """


@coverage.command("show", cls=Command, impl="npuport.cli.coverage_impl:show")
@click.argument("op")
@torch_npu_option("version")
@report_options(FORMATS)
@quiet_debug
@handle_errors
def show(output: str | None, json_out: str | None, force: bool, **_: Any) -> None:
    """Status of OP (aten::add.Tensor, aten::mm, npu::npu_rms_norm) across all checked-in releases, with each
    release's build date; * marks the release chosen with --torch-npu (any version: a release that shares another's
    data, or an unlisted one, stands for that data, with a note). View and metadata ops (aten::view, aten::t,
    aten::size) show `view`: no kernel. The answer for the chosen release (default: the newest) comes first, in one
    line, then the table. A name no release knows is an error naming the nearest ones; so is a namespace that neither
    the data (aten::, npu::) nor the running torch knows.

    \b
    Examples:
      npuport coverage show aten::mm
      npuport coverage show aten::isin.Tensor_Tensor --torch-npu 2.3.1 --format json
    """
    check_new([output, json_out], force)


@coverage.command("diff", cls=Command, impl="npuport.cli.coverage_impl:diff", help=f"""Ops that start or stop running on
    the NPU, or otherwise change status, from OLD to NEW: two torch_npu releases ({len(available_versions())} of the
    {len(published_versions())} published have data, {(available_versions() or ['-'])[0]} to {(available_versions() or ['-'])[-1]}; another
    version stands for the nearest earlier one).

    \b
    Examples:
      npuport coverage diff 2.1.0.post10 2.14.0
      npuport coverage diff 2.13.0 2.14.0 --format json --json-out diff.json
    """)
@click.argument("old")
@click.argument("new")
@report_options(FORMATS)
@quiet_debug
@handle_errors
def diff(output: str | None, json_out: str | None, force: bool, **_: Any) -> None:
    check_new([output, json_out], force)


@coverage.command("list", cls=Command, impl="npuport.cli.coverage_impl:list_ops")
@click.option("--status", type=click.Choice(LIST_STATUSES), required=True,
              help="The status to list (view: view and metadata ops, which run no kernel).")
@torch_npu_option("version")
@report_options(FORMATS)
@quiet_debug
@handle_errors
def list_ops(output: str | None, json_out: str | None, force: bool, **_: Any) -> None:
    """Every op of one release with the given status (their count on stderr).

    \b
    Examples:
      npuport coverage list --status cpu-fallback
      npuport coverage list --status npu-custom --torch-npu 2.3.1 --format json
    """
    check_new([output, json_out], force)
