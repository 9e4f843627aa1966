"""`npuport parity`, the work (npuport.cli.parity declares the options): flags -> api.ModelSpec + api.ParityOptions,
api.parity_run / parity_compare / parity_record, the npuport.parity/1 JSON form rendered with npuport.render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import click

from npuport.api import ModelSpec, ParityOptions, parity_compare, parity_record, parity_run
from npuport.cli.common import emit, handle_errors, pick_format, progress_printer, quiet_stderr, say, text_width
from npuport.cli.parity import FORMATS
from npuport.render.parity_doc import render_html, render_markdown
from npuport.render.parity_text import render_text


def _spec(kw: dict[str, Any]) -> ModelSpec:
    return ModelSpec(model=kw["model"], hf_config=kw["hf_config"], entry=kw["entry"], dtype=kw["dtype"], attn=kw["attn"])


def _options(kw: dict[str, Any], **extra: Any) -> ParityOptions:
    return ParityOptions(scenario=kw["scenario"], seed=kw["seed"], stats_only=kw["stats_only"], ops=kw["ops"],
                         op_sequence=kw["op_sequence"], backward=kw["backward"], keep=tuple(kw["keep"]),
                         stats_budget_mib=kw["stats_budget"], allow_tf32=kw["allow_tf32"],
                         deterministic=not kw["no_deterministic"], train_mode=kw["train_mode"], **extra)


def _compare(ref: str, dev: str, kw: dict[str, Any], run: Callable[..., Any] = parity_run) -> None:
    fmt = pick_format(kw["fmt"], kw["output"], FORMATS)
    opts = _options(kw, golden=kw["golden"], k=kw["k"], rel_l2=kw["rel_l2"], localize=not kw["no_localize"],
                    allow_unmatched=kw["allow_unmatched"])
    with quiet_stderr(kw["quiet"]):
        result, data = run(ref, dev, _spec(kw), opts, progress=progress_printer(not kw["quiet"]))
    as_json = json.dumps(data, indent=1, allow_nan=False) + "\n"
    if fmt == "json":
        text = as_json
    elif fmt == "markdown":
        text = render_markdown(data)
    elif fmt == "html":
        text = render_html(data)
    else:
        text = render_text(data, top=kw["top"], width=text_width(kw["wide"], kw["output"]), wide=kw["wide"])
    emit(text, kw["output"], kw["force"], kw["quiet"], fmt, json_text=as_json, json_out=kw["json_out"])
    if kw["output"] and not kw["quiet"]:
        click.echo(data["verdict"]["text"], err=True)
    if not result:
        raise click.exceptions.Exit(1)


@handle_errors
def run_cmd(ref: str, dev: str, **kw: Any) -> None:
    _compare(ref, dev, kw)


@handle_errors
def compare_cmd(ref: str, dev: str, **kw: Any) -> None:
    _compare(ref, dev, kw, parity_compare)


@handle_errors
def record_cmd(dev: str, out_dir: str, force: bool, store_weights: bool | None, **kw: Any) -> None:
    with quiet_stderr(kw["quiet"]):
        path = parity_record(_spec(kw), dev, out_dir, _options(kw, store_weights=store_weights), force=force,
                             progress=progress_printer(not kw["quiet"]))
    size = sum(p.stat().st_size for p in Path(path).iterdir())
    say(kw["quiet"], f"recorded {path} ({size / 2**20:.1f} MiB)")
