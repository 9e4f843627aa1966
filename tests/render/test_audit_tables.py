"""How the audit's tables read: --top limits every text table (0: all), a narrow terminal says which columns it left
out, a table printed as a list keeps its column names, the two kinds of share are labelled apart, the fusion table
leads with the saving the top action quotes, markdown escapes what GitHub would take for HTML, the activations by
module add up to their total, and small sizes keep a readable unit."""

from __future__ import annotations

import copy
import io
import re
from typing import Any

from rich.console import Console

from npuport.render.audit_doc import actions, activation_rows, build, memory_section
from npuport.render.audit_markdown import render_markdown
from npuport.render.audit_text import render_text
from npuport.render.fmt import fmt_bytes, fmt_share
from npuport.render.table import Column, Table, fit_table


def _text(data: dict[str, Any], width: int = 120, top: int = 30) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    render_text(data, console, top=top)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def test_top_limits_every_text_table(gpt_audit: dict[str, Any]) -> None:
    for sec in build(gpt_audit, top=2):
        for t in sec.tables:
            assert t.limit == 2, t.id
    assert all(t.limit is None for sec in build(gpt_audit, top=0) for t in sec.tables)
    two = _text(gpt_audit, top=2)
    routes = two[two.index("Implementation routes"):two.index("Notes and assumptions")]
    assert len([r for r in gpt_audit["routes"] if r["target"].split(" @ ")[0] in routes]) <= 2
    assert f"{len(gpt_audit['routes']) - 2} more routes not shown: --top 0 shows all" in routes
    everything = _text(gpt_audit, top=0)
    assert "not shown" not in everything and "more modules" not in everything
    for m in gpt_audit["modules"]:
        assert m["module"] in everything
    # markdown and HTML never cut a row, whatever --top says
    md = render_markdown(gpt_audit)
    assert all(r["target"] in md for r in gpt_audit["routes"])


def test_columns_left_out_at_80_are_named_with_the_way_to_see_them(gpt_audit: dict[str, Any]) -> None:
    text = _text(gpt_audit, width=80)
    inv = text[text.index("Operator inventory"):text.index("Modules (layer")]
    m = re.search(r"(\d+) columns? left out at this width \(([^)]*(?:\([^)]*\)[^)]*)*)\): --wide, or --format markdown / "
                  r"html", " ".join(inv.split()))
    assert m, inv
    shown = inv.splitlines()[1]  # the header row
    assert "modules" in m.group(2) and "modules" not in shown and "NPU impl" in m.group(2)
    assert int(m.group(1)) == len(re.findall(r"(?:^|, )(?:[^,(]|\([^)]*\))+", m.group(2)))
    wide = Console(record=True, width=80, file=io.StringIO(), color_system=None)
    render_text(gpt_audit, wide, wide=True)
    assert "left out at this width" not in wide.export_text()


def test_a_table_printed_as_a_list_keeps_its_column_names() -> None:
    t = Table("memory", "", [Column("bytes on the device")] + [Column(n, "right") for n in ("train", "prefill", "decode")],
              [["weights", "12.6 GiB", "12.6 GiB", "12.6 GiB"], ["gradients", "12.6 GiB", "", ""],
               ["traced peak at", "backward", "forward model.layers.31.mlp.down_proj", "forward model.layers.31.self_attn"]])
    got = fit_table(t, 66, wide=False)
    console = Console(record=True, width=66, file=io.StringIO(), color_system=None)
    console.print(got.table)
    lines = console.export_text().splitlines()
    assert lines[0].split() == ["-", "weights", "train:", "12.6", "GiB", "prefill:", "12.6", "GiB", "decode:", "12.6",
                                "GiB"]
    assert lines[1].split() == ["-", "gradients", "train:", "12.6", "GiB"]
    assert got.hidden_columns == [] and got.hidden_rows == 0


def test_the_two_shares_are_labelled_apart(gpt_audit: dict[str, Any]) -> None:
    tables = {t.id: t for sec in build(gpt_audit) for t in sec.tables}
    assert [c.name for c in tables["ops"].columns][:3] == ["op", "class", "mean share"]
    assert "mean share" in [c.name for c in tables["modules"].columns]
    cols = [c.name for c in tables["findings"].columns]
    share = cols.index("share (largest)")
    scenarios = {s["name"] for s in gpt_audit["scenarios"]}
    for f, row in zip(gpt_audit["findings"], tables["findings"].rows):
        per = f["time_share_by_scenario"]
        assert max(per.values()) == f["time_share"]
        top = max(per, key=per.get)
        assert top in scenarios and row[share] == f"{fmt_share(f['time_share'])}\n({top})"


def test_the_fusion_table_leads_with_the_saving_the_top_action_quotes(gpt_audit: dict[str, Any]) -> None:
    data = copy.deepcopy(gpt_audit)
    data["scenarios"] = data["scenarios"] + [dict(data["scenarios"][0], name="train", kind="train", estimated_time_s=1.0)]
    extra = copy.deepcopy(next(r for r in data["fusions"] if r["time_saved_s"]))
    extra.update(scenario="train", time_saved_s=extra["time_saved_s"] * 10)  # more time, a smaller share of a long step
    data["fusions"] = [extra] + data["fusions"]
    rows = {t.id: t for sec in build(data) for t in sec.tables}["fusions"].rows
    first_fusion = next(a for a in actions(data) if a.what.startswith("fuse "))
    assert rows[0][0] == gpt_audit["scenarios"][0]["name"] and f"per {rows[0][0]} step" in first_fusion.fix
    assert rows[0][5].startswith(first_fusion.fix.split("saves ")[1].split(" per")[0] + " (")


def test_markdown_escapes_what_github_takes_for_html(gpt_audit: dict[str, Any]) -> None:
    data = copy.deepcopy(gpt_audit)
    path = "model.layers.*.self_attn.<Func>.<Func>"
    data["findings"][0]["evidence"][0]["module"] = path  # a plain cell ("where") and a code cell (evidence)
    data["notes"] += [f"note on {path}", "assert targets.max() < C, x > 0"]
    md = render_markdown(data)
    assert "model.layers.*.self_attn.&lt;Func&gt;.&lt;Func&gt; @" in md
    assert f"`{path}`" in md  # a code span shows it as it is
    assert "note: note on model.layers.*.self_attn.&lt;Func&gt;.&lt;Func&gt;" in md
    assert "<Func>" not in re.sub(r"`[^`\n]*`", "", md)  # outside code spans, never a raw tag
    assert "note: assert targets.max() < C, x > 0" in md  # not a tag: left as it is


def test_activation_rows_add_up_to_the_total(gpt_audit: dict[str, Any]) -> None:
    gib = 2**30
    rows = activation_rows({"lm_head": int(1.5 * gib), "blocks.*.mlp.fc": gib}, int(22.2 * gib))
    assert rows[-2] == ["elsewhere: non-leaf modules and the model's own code", "19.7 GiB"]
    assert rows[-1] == ["total (activations kept for backward)", "22.2 GiB"]
    by = {f"m{i}": gib for i in range(12)}
    assert "smaller modules" in activation_rows(by, 20 * gib)[-2][0]
    assert activation_rows({"a": 2 * gib}, gib)[-2] == ["counted above but freed before forward returned", "-1.0 GiB"]


def test_small_sizes_keep_a_unit_and_inference_has_no_optimizer_header(gpt_audit: dict[str, Any]) -> None:
    assert [fmt_bytes(n) for n in (0, 512, 64 * 2**10, 39 * 2**20, int(0.5 * 2**30), int(12.6 * 2**30))] == \
        ["0 B", "512 B", "64.0 KiB", "39.0 MiB", "0.5 GiB", "12.6 GiB"]
    sec = memory_section(gpt_audit)  # the fixture traces a prefill only
    assert sec is not None and sec.title == "Device memory (traced on fake tensors)"
    rows = {r[0]: r[1:] for r in sec.tables[0].rows}
    assert all(not v.startswith("0.0 ") for vals in rows.values() for v in vals)
    scen = {t.id: t for s in build(gpt_audit) for t in s.tables}["scenarios"]
    assert scen.columns[2].name == "compute calls"
