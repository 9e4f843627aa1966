"""The parity report as the terminal shows it, rendered from its JSON form (schema npuport.parity/1): the answer first
(verdict, first divergence, what to look at), then the entries (the failing ones first, all of them up to `top`,
then the worst passing ones), and the verdict again at the end."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.markup import escape as esc

from npuport.render.table import Column, Table, fit


def look_at(data: dict[str, Any]) -> list[str]:
    """What to look at, from the first divergence and its replay: the op that computes differently on its own
    inputs, the module whose inputs were already off, or nothing."""
    v, fd = data["verdict"], data["first_divergence"]
    if v["passed"]:
        out = ["nothing to fix: every compared entry is within tolerance"]
        modes = (data.get("scenario") or {}).get("modes") or {}
        only = data.get("unmatched") or {}
        compiled_only = sum(len(only.get(f"{role}_only") or ()) for role, m in modes.items() if m != "eager")
        if v["unmatched"] and (data.get("scenario") or {}).get("mode") == "mixed" and not compiled_only:
            # an eager side against a compiled one: the compiled side has only the model's own entries by design, so
            # entries the eager side alone has are expected (entries only the compiled side has would not be)
            eager = [role for role, m in modes.items() if m == "eager"]
            out.append(f"only the entries both sides have were compared (the model's inputs, outputs, gradients): the "
                       f"{' and '.join(eager) or 'eager'} side's "
                       f"{v['unmatched']} module entries have no compiled counterpart (one side ran under torch.compile)")
        elif v["unmatched"]:
            out.append(f"but {v['unmatched']} entries exist on one side only (listed below): the two runs did not take the same path")
        return out
    if not fd:
        return [f"{v['failed']} entries fail; no single first divergence was located (--format json lists them all)"]
    out = [f"the first module whose output leaves tolerance: {fd['call_key']} ({fd['entry']})"]
    rp = fd.get("replay")
    if rp:
        bad = [o for o in rp["ops"] if not o["passed"]]
        if rp["verdict"] == "introduces" and bad:
            o = bad[0]
            out.append(f"op {o['op']} in {o['module'] or '<model>'} differs from float64 on its own inputs "
                       f"(rel_l2 {_g(o['rel_l2'])} > {_g(o['limit'])}): that op computes differently on the device under test")
        elif rp["verdict"] == "introduces":
            out.append("replayed alone on the same inputs, this module introduces the error: compare its ops (--ops)")
        else:
            out.append("replayed alone on the reference's inputs it stays within tolerance: the error comes from upstream state")
    elif not fd["inputs_within"]:
        out.append("its inputs already differed: look at what feeds it (--ops records every op)")
    return out


def render_text(data: dict[str, Any], top: int = 25, width: int | None = None, wide: bool = False) -> str:
    console = Console(record=True, width=width or 120, file=open("/dev/null", "w"))
    v = data["verdict"]
    console.print(("[bold green]" if v["passed"] else "[bold red]") + esc(v["text"]) + "[/]")
    for i, line in enumerate(look_at(data)):
        console.print(("what to look at: " if i == 0 else "  ") + esc(line))
    for s in data["sides"]:
        console.print(f"[bold]{s['role']}[/]: " + esc(f"{s['label']} ({s['source']}{', ' + s['path'] if s.get('path') else ''})"))
    relative = data["verdict"]["mode"] == "relative"
    cols = [Column("entry", kind="code"), Column("dtype", priority=3), Column("rel_l2", "right"),
            Column("cosine", "right", priority=1), Column("max_abs", "right", priority=4),
            Column("dev/golden" if relative else "frac>rtol", "right", priority=2), Column("status", kind="status")]
    rows = [e for e in data["entries"] if e["io"] != "in"]
    bad = [e for e in rows if not e["passed"]]
    good = sorted((e for e in rows if e["passed"]), key=lambda e: -_sortable(e["metrics"]["rel_l2"]))
    shown = (bad + good)[: top] if top else bad + good
    cells = []
    for e in sorted(shown, key=lambda e: e["order"]):
        m = e["metrics"]
        extra = f"{_g(e['golden']['dev_err'])}/{_g(e['golden']['ref_err'])}" if e.get("golden") else _g(m["frac_over_rtol"])
        cells.append([e["key"], e["dtype"], _g(m["rel_l2"]), _g(m["cosine"], 8), _g(m["max_abs"]), extra,
                      "ok" if e["passed"] else f"FAIL {e['reason']}"])
    table, _ = fit(Table("entries", "", cols, cells), console.width, wide)
    console.print(table)
    if len(rows) > len(shown):
        hidden_bad = len(bad) - sum(1 for e in shown if not e["passed"])
        what = f"{hidden_bad} failing, {len(rows) - len(shown) - hidden_bad} passing" if hidden_bad else "passing"
        console.print(f"({len(rows) - len(shown)} more entries ({what}); --top 0 shows all, --format json has every entry)")
    un = data["unmatched"]
    for side, keys in (("ref only", un["ref_only"]), ("dev only", un["dev_only"]), ("no golden", un["golden_missing"])):
        if keys:
            console.print(f"[yellow]{side}[/] ({len(keys)}): " + esc(f"{', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}"))
    fd = data["first_divergence"]
    if fd:
        console.print("[bold]first divergence[/]: " + esc(f"{fd['call_key']} ({fd['entry']}): {fd['reason']}"
                      + ("" if fd["inputs_within"] else " (its inputs already differed)")))
        rp = fd.get("replay")
        if rp:
            console.print(f"  replay on dev with {rp['inputs_from']} inputs: [bold]{rp['verdict']}[/] the error " + esc(f"({rp['reason']})"))
            for o in [o for o in rp["ops"] if not o["passed"]][:5]:
                console.print(esc(f"  op {o['op']} in {o['module'] or '<model>'} (#{o['index']}): rel_l2 {_g(o['rel_l2'])} "
                                  f"against float64 on its own inputs > {_g(o['limit'])}"))
        for n in fd.get("notes", []):
            console.print(esc(f"  note: {n}"))
    for w in data["warnings"][:10]:
        console.print("[yellow]warning[/]: " + esc(w))
    v = data["verdict"]
    console.print(("[bold green]" if v["passed"] else "[bold red]") + esc(v["text"]) + "[/]")
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def _sortable(v: Any) -> float:
    return math.inf if isinstance(v, str) else float(v)


def _g(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    return f"{v:.{digits}g}" if digits < 6 else f"{v:.{digits}f}"
