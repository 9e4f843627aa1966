"""The audit as a markdown document (for issues, PRs and migration plans)."""

from __future__ import annotations

from typing import Any

from npuport.render.fmt import fmt_share, fmt_si, fmt_time, short_source


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render_markdown(data: dict[str, Any], top: int = 40) -> str:
    m = data["model"]
    sc_names = [s["name"] for s in data["scenarios"]]
    lines = [f"# npuport audit: {m['name']}", "",
             f"{m['parameters'] / 1e9:.3g} B parameters, {m['dtype']}; target **{data['chip']}** ({data['chip_description']})"
             + (f"; torch_npu {data['torch_npu'] or data.get('coverage', {}).get('version', '')}" if data.get("coverage") else ""), "",
             "| scenario | shape | compute ops | FLOPs | bytes | estimated time |", "|---|---|---:|---:|---:|---:|"]
    for s in data["scenarios"]:
        shape = f"{s['batch']} x {s['seq']}" + ((f", no cache, re-runs {s['past'] + s['seq']} tokens" if s.get("recompute") else f", cache {s['past']}") if s["past"] else "") + (", fwd+bwd" if s["kind"] == "train" else "")
        lines.append(f"| {s['name']} | {shape} | {s['compute_calls']:,} | {fmt_si(s['flops'], 'FLOP')} | {fmt_si(s['bytes'], 'B')} | {fmt_time(s['estimated_time_s'])} |")
    for f in data.get("failed_scenarios", []):
        lines.append(f"| {f['name']} | **could not be traced**: {f['reason'].replace('|', '/')} | | | | |")
    lines += ["", "## Operator inventory", "",
              "| op | class | share | " + " | ".join(sc_names) + " | calls | shapes by scenario | dtypes | modules | source | fused | NPU impl |",
              "|---|---|---:|" + "---:|" * len(sc_names) + "---:|---|---|---|---|---|---|"]
    for o in [o for o in data["ops"] if o["kind"] == "compute"][:top]:
        per = [f"{fmt_share(o['scenarios'][n]['time_share'])} {o['scenarios'][n]['bound']}" if n in o["scenarios"] else "" for n in sc_names]
        shapes = "<br>".join(f"{n}: {sc['shapes'][0]['inputs']}" + (f" (+{sc['distinct_shapes'] - 1})" if sc["distinct_shapes"] > 1 else "")
                             for n, sc in o["scenarios"].items() if sc["shapes"])
        cov = o.get("coverage") or {}
        lines.append("| " + " | ".join([
            f"`{o['op']}`", o["class"], fmt_share(o["time_share"]), *per, f"{o['calls']:,}", _cell(shapes),
            ", ".join(o["dtypes"]), _cell("<br>".join(o["modules"][:3])), _cell(short_source(o["sources"][0]) if o["sources"] else ""),
            "yes" if o["fused"] else "no", cov.get("status", ""),
        ]) + " |")
    lines += ["", "## Modules", "", "| module | type | share |", "|---|---|---:|"]
    for me in data["modules"][:15]:
        lines.append(f"| `{me['module']}` | {me['type']} | {fmt_share(me['time_share'])} |")
    lines += ["", "## Estimated step time per chip", "", "| chip | " + " | ".join(sc_names) + " |", "|---|" + "---:|" * len(sc_names)]
    for chip in data["scenarios"][0]["estimated_time_s_by_chip"]:
        lines.append(f"| {chip} | " + " | ".join(fmt_time(s["estimated_time_s_by_chip"][chip]) for s in data["scenarios"]) + " |")
    if data["notes"] or data["assumptions"]:
        lines += ["", "## Notes and assumptions", ""]
        lines += [f"- note: {n}" for n in data["notes"]] + [f"- assumption: {a}" for a in data["assumptions"]]
    return "\n".join(lines) + "\n"
