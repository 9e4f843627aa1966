"""`npuport parity`, the work (npuport.cli.parity declares the options): flags -> api.ModelSpec + api.ParityOptions,
api.parity_run / parity_compare / parity_record, the npuport.parity/1 JSON form rendered with npuport.render."""

from __future__ import annotations

import json
import os
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
                    allow_unmatched=kw["allow_unmatched"], verify=kw.get("verify") or "once")
    with quiet_stderr(kw["quiet"]):
        result, data = run(ref, dev, _spec(kw), opts, progress=progress_printer(not kw["quiet"]))
    # the indented JSON costs 0.15 s for a 6,000-entry record (json's pure-Python encoder): made only when written
    as_json = json.dumps(data, indent=1, allow_nan=False) + "\n" if fmt == "json" or kw["json_out"] else None
    if fmt == "json":
        text = as_json or ""
    elif fmt == "markdown":
        text = render_markdown(data)
    elif fmt == "html":
        text = render_html(data)
    else:
        text = render_text(data, top=kw["top"], width=text_width(kw["wide"], kw["output"]), wide=kw["wide"])
    if fmt in ("text", "markdown") and data.get("ranks", {}).get("rows"):
        text = _with_ranks(text, data["ranks"], fmt, data["verdict"]["text"])
    if _rank() == 0:  # under torchrun every rank computes the verdict (and exit code); rank 0 reports it
        emit(text, kw["output"], kw["force"], kw["quiet"], fmt, json_text=as_json, json_out=kw["json_out"])
        if kw["output"] and not kw["quiet"]:
            click.echo(data["verdict"]["text"], err=True)
    if not result:
        raise click.exceptions.Exit(1)


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def _with_ranks(text: str, ranks: dict[str, Any], fmt: str, verdict: str) -> str:
    """The per-rank rows of a rank-by-rank comparison (the JSON form's `ranks`), before the closing verdict line in
    text, as a section at the end in markdown. (Belongs in npuport.render with the rest of the report.)"""
    rows = []
    for r in ranks["rows"]:
        worst = r["worst_entry"]
        fd = r["first_divergence"]
        rows.append((str(r["rank"]), "PASS" if r["passed"] else "DIVERGED", f"{r['failed']} of {r['checked']}",
                     f"{worst['key']} {worst['rel_l2']:.3g}" if worst and not isinstance(worst["rel_l2"], str) else
                     (f"{worst['key']} {worst['rel_l2']}" if worst else "-"),
                     f"{fd['call_key']} ({fd['entry']})" if fd else "-"))
    sizes = ", ".join(f"{role} {n}" for role, n in ranks["world_size"].items())
    head = f"ranks compared rank by rank (world size: {sizes}); worst rank {ranks['worst_rank']}"
    if fmt == "markdown":
        table = ["| rank | verdict | failed | worst entry, rel_l2 | first divergence |", "|---|---|---|---|---|"]
        table += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return text.rstrip("\n") + "\n\n## Ranks\n\n" + head + "\n\n" + "\n".join(table) + "\n"
    cols = ("rank", "verdict", "failed", "worst entry, rel_l2", "first divergence")
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    lines = [head, "  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    at = text.rfind("\n" + verdict.split()[0] + " ")  # the closing verdict (the console may have wrapped it)
    return text[: at + 1] + "\n".join(lines) + text[at:] if at >= 0 else text + "\n".join(lines) + "\n"


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
    if _rank() == 0:
        size = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
        say(kw["quiet"], f"recorded {path} ({size / 2**20:.1f} MiB)")
