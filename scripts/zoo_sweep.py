#!/usr/bin/env python3
"""Audit every model type of the installed transformers' causal-LM mapping, from its default config with the layer
count cut to 2, as a new user would (`npuport audit --hf config.json --format json`).

For each type it also runs a control: can transformers itself build that type and run a forward on small real
tensors (the same config with small widths, on the CPU)? A type that fails the control is not npuport's to fix.

One line per type, then a summary. Each type runs in its own forked process (so one model's monkeypatches or
memory never reach the next) with a time limit.

    python scripts/zoo_sweep.py                      # every type, 2 workers
    python scripts/zoo_sweep.py llama qwen3_moe      # some types
    python scripts/zoo_sweep.py --json out.json      # also write the rows
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import time
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402

from npuport.model.hf.zoo import causal_lm_types, cut_layers, default_config, for_each_type, tiny  # noqa: E402


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:220] if lines else ""


def control(raw: dict) -> tuple[str, str]:
    """Build the type with small widths on real CPU tensors (the class npuport builds: the text decoder of a
    composite config) with transformers' own initialization, and run one forward of 8 tokens."""
    from contextlib import nullcontext

    from npuport.model.hf.build import build
    from npuport.model.hf.inputs import vocab_size

    try:
        torch.manual_seed(0)
        model = build(tiny(raw), "float32", None, nullcontext(), part="text").module.eval()
        with torch.no_grad():
            model(input_ids=torch.randint(0, min(vocab_size(model.config), 256), (1, 8)))
        return "ok", ""
    except Exception as exc:  # the control reports, it does not judge
        return "fail", f"{type(exc).__name__}: {_first_line(str(exc))}"


def audit(raw: dict, folder: Path) -> tuple[int, str, dict]:
    from npuport.cli.main import cli

    path = folder / f"{raw['model_type']}.json"
    path.write_text(json.dumps(raw, default=str))
    out = folder / f"{raw['model_type']}.audit.json"
    err = io.StringIO()
    code = 0
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            code = int(cli.main(["audit", "--hf", str(path), "-o", str(out), "--quiet"], standalone_mode=False) or 0)
        except SystemExit as exc:
            code = int(exc.code or 0)
        except Exception as exc:  # a crash is a bug in npuport: report it as exit 3
            code = 3
            err.write(f"{type(exc).__name__}: {exc}\n")
    info: dict = {}
    if out.exists():
        data = json.loads(out.read_text())
        info["share_sum"] = round(sum(o["time_share"] for o in data["ops"]), 9)
        info["scenarios"] = [s["name"] for s in data["scenarios"]]
        info["failed"] = [f["name"] for f in data.get("failed_scenarios", [])]
        info["dtype"] = data["model"].get("dtype")
        info["ops"] = len(data["ops"])
    return code, _first_line(err.getvalue()), info


def one(model_type: str, folder: str) -> dict:
    t0 = time.perf_counter()
    row: dict = {"type": model_type}
    try:
        raw = cut_layers(default_config(model_type), 2)
    except Exception as exc:
        row.update(status="config", reason=f"{type(exc).__name__}: {_first_line(str(exc))}")
        return row
    row["control"], row["control_reason"] = control(raw)
    t1 = time.perf_counter()
    code, reason, info = audit(raw, Path(folder))
    row.update(exit=code, reason=reason, audit_s=round(time.perf_counter() - t1, 1), **info)
    row["control_s"] = round(t1 - t0, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("types", nargs="*", help="model types (default: every causal-LM type)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per type")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--markdown", help="write the run as a markdown page (docs/zoo.md)")
    args = ap.parse_args()
    types = args.types or causal_lm_types()
    import npuport.cli.main  # noqa: F401  - imported once, before forking

    rows: list[dict] = []
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} cores, {len(types)} types", flush=True)
    for row in for_each_type(types, one, args.workers, args.timeout):
        if row.get("status") == "error":  # the child died or timed out
            row = {"type": row["type"], "exit": -1, "reason": row["reason"]}
        rows.append(row)
        print(_line(row), flush=True)
    _summary(rows)
    if args.markdown:
        Path(args.markdown).write_text(_markdown(rows, args))
    if args.json:
        Path(args.json).write_text(json.dumps(sorted(rows, key=lambda r: r["type"]), indent=1))
    return 0


def _line(r: dict) -> str:
    ctl = r.get("control", "-")
    if r.get("status") == "config":
        return f"{r['type']:<28} config   {r['reason']}"
    ok = r.get("exit") == 0 and abs(r.get("share_sum", 0) - 1) < 1e-6
    verdict = "ok" if ok else f"exit {r.get('exit')}"
    extra = f"{r.get('dtype', '')} {r.get('audit_s', '')}s" if ok else r.get("reason", "")
    if r.get("failed"):
        extra += f" failed scenarios: {','.join(r['failed'])}"
    ctl_txt = ctl if ctl == "ok" else f"{ctl} ({r.get('control_reason', '')[:80]})"
    return f"{r['type']:<28} {verdict:<8} control {ctl_txt:<10} {extra}"


def _markdown(rows: list[dict], args: argparse.Namespace) -> str:
    rows = sorted(rows, key=lambda r: r["type"])
    ok = lambda r: r.get("exit") == 0 and abs(r.get("share_sum", 0) - 1) < 1e-6  # noqa: E731
    ctl = [r for r in rows if r.get("control") == "ok"]
    lines = [
        "# The transformers zoo: every causal-LM type audited",
        "",
        f"Command: `python scripts/zoo_sweep.py --workers {args.workers} --timeout {args.timeout:.0f} --markdown docs/zoo.md`. "
        f"transformers {transformers.__version__}, torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cores "
        f"(this project's CPU machine), {time.strftime('%Y-%m-%d')}.",
        "",
        "Each type of the installed transformers' causal-LM mapping, from its default config with the layer count cut "
        "to 2 (a hybrid keeps one layer of each kind; per-layer lists cut to match), audited as a user would "
        "(`npuport audit --hf config.json -o audit.json`, default scenarios). The control builds the same class with "
        "small widths on real CPU tensors with transformers' own initialization and runs a forward of 8 tokens: a type "
        "that fails it is one transformers itself cannot build or run from its default config.",
        "",
        f"**Summary:** {len(rows)} types; the control passes for {len(ctl)}; the audit exits 0 with time shares summing "
        f"to 1 for {sum(ok(r) for r in rows)}; of the types that pass the control, {sum(ok(r) for r in ctl)} of {len(ctl)} audit.",
        "",
        "| type | audit | control | dtype | audit s | reason (when not ok) |",
        "|---|---|---|---|---:|---|",
    ]
    for r in rows:
        verdict = "ok" if ok(r) else ("config" if r.get("status") == "config" else f"exit {r.get('exit')}")
        reason = "" if ok(r) else r.get("reason", "").replace("|", "/")[:200]
        if r.get("failed"):
            reason = f"failed: {', '.join(r['failed'])}; " + reason
        c = r.get("control", "-")
        if c != "ok":
            c += f" ({r.get('control_reason', '')[:90].replace('|', '/')})"
        lines.append(f"| {r['type']} | {verdict} | {c} | {r.get('dtype', '')} | {r.get('audit_s', '')} | {reason} |")
    return "\n".join(lines) + "\n"


def _summary(rows: list[dict]) -> None:
    ctl_ok = [r for r in rows if r.get("control") == "ok"]
    audit_ok = [r for r in rows if r.get("exit") == 0 and abs(r.get("share_sum", 0) - 1) < 1e-6]
    both = [r for r in ctl_ok if r in audit_ok]
    print(f"\n# summary: {len(rows)} types; control passes {len(ctl_ok)}; audit exit 0 {len(audit_ok)}; "
          f"control passes and audit exit 0: {len(both)} of {len(ctl_ok)}")
    bad = [r for r in ctl_ok if r not in audit_ok]
    if bad:
        print("# control passes, audit does not: " + ", ".join(r["type"] for r in bad))


if __name__ == "__main__":
    sys.exit(main())
