#!/usr/bin/env python3
"""Recall and precision of the source scan, and what `npuport migrate` does, on public training repositories.

For each repository, docs/migrate/refs/<name>.json lists every CUDA-specific reference found by reading the files
by hand (file, line, category; the code itself is not kept). This script materializes those files from a git
directory at the listed commit (`fetch` brings one: /work/.mirror/<owner>+<repo>/...), runs the scan and migrate
on them, and compares by (file, line): a hand reference is found when the tool reports that line (as many times
as the hand list has it). It also checks that migrate changed no behaviour: in each migrated file, either every
"cuda" device string and test was rewritten or none was.

    python scripts/migrate_recall.py --git karpathy/nanoGPT=/work/.mirror/karpathy+nanoGPT/... [--markdown]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.scan.cuda_refs import Finder  # noqa: E402
from npuport.scan.migrate import migrate_program  # noqa: E402

REFS = ROOT / "docs" / "migrate" / "refs"


def materialize(git_dir: str, commit: str, files: list[str], prefix: str, out: Path) -> None:
    listing = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", commit],
                             capture_output=True, text=True, check=True).stdout.split()
    for name in listing:  # every Python file of the tree, so imports resolve as in the repository
        if name.endswith(".py"):
            blob = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{name}"], capture_output=True, check=True).stdout
            dest = out / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(blob)
    for f in files:
        if not (out / prefix / f).is_file():
            raise SystemExit(f"{prefix}{f} is not in {git_dir} at {commit}")


def measure(spec: dict, git_dir: str) -> dict:
    prefix = (spec.get("root") or "").rstrip("/")
    prefix = prefix + "/" if prefix else ""
    hand = Counter((r["file"], r["line"]) for r in spec["refs"])
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        materialize(git_dir, spec["commit"], spec["files"], prefix, base)
        root = base / prefix
        tool: Counter = Counter()
        edits = 0
        consistent = True
        covered: set[str] = set()
        for entry in spec.get("entries") or spec["files"][:1]:
            program = migrate_program(root / entry, root=root)
            for m in program.files:
                if m.display in covered:
                    continue
                covered.add(m.display)
                for r in m.refs:
                    tool[(m.display, r.line)] += 1
                edits += len(m.edits)
                consistent &= _consistent(m.migrated)
        in_scope = {f for f in spec["files"]}
        tool = Counter({k: v for k, v in tool.items() if k[0] in in_scope})
    # lines the reader judged borderline (a device-neutral API with a CUDA tuning meaning): a report there is
    # neither a hit nor a false positive
    borderline = {(b["file"], b["line"]) for b in spec.get("borderline", [])}
    on_borderline = sorted(f"{f}:{ln}" for (f, ln) in tool if (f, ln) in borderline and (f, ln) not in hand)
    tool = Counter({k: v for k, v in tool.items() if k not in borderline or k in hand})
    found = sum(min(n, tool[k]) for k, n in hand.items())
    agreed = sum(min(n, hand[k]) for k, n in tool.items())
    missed = sorted(k for k, n in hand.items() if tool[k] < n)
    extra = sorted(k for k, n in tool.items() if hand[k] < n)
    by_cat: Counter = Counter()
    miss_cat: Counter = Counter()
    seen: Counter = Counter()
    for r in spec["refs"]:
        key = (r["file"], r["line"])
        by_cat[r["category"]] += 1
        seen[key] += 1
        if seen[key] > tool[key]:
            miss_cat[r["category"]] += 1
    return {
        "repo": spec["repo"], "commit": spec["commit"], "files": len(spec["files"]), "hand": sum(hand.values()),
        "tool": sum(tool.values()), "found": found, "recall": found / max(1, sum(hand.values())),
        "precision": agreed / max(1, sum(tool.values())), "edits": edits, "consistent": consistent,
        "missed": [f"{f}:{ln}" for f, ln in missed], "extra": [f"{f}:{ln}" for f, ln in extra],
        "missed_by_category": dict(miss_cat), "by_category": dict(by_cat), "borderline_reported": on_borderline,
    }


def _consistent(text: str) -> bool:
    """No file may hold both a rewritten device string ("npu") and a "cuda" device string or test left behind."""
    refs = Finder(text, ast.parse(text)).run()
    cuda_left = any(r.group == "device" for r in refs)
    npu_strings = any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.split(":")[0] == "npu"
                      and "hccl" not in n.value for n in ast.walk(ast.parse(text)))  # backend strings are their own group
    return not (cuda_left and npu_strings)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--git", action="append", default=[], metavar="OWNER/REPO=GIT_DIR", help="where each repository's git directory is")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    dirs = dict(x.split("=", 1) for x in args.git)
    rows = []
    for path in sorted(REFS.glob("*.json")):
        spec = json.loads(path.read_text())
        if spec["repo"] not in dirs:
            print(f"# skipped {spec['repo']}: no --git {spec['repo']}=DIR", file=sys.stderr)
            continue
        rows.append(measure(spec, dirs[spec["repo"]]))
    if args.markdown:
        print("| repository (commit) | files | references by hand | found by npuport | recall | precision | mechanical edits | behaviour-changing edits |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['repo']} ({r['commit'][:7]}) | {r['files']} | {r['hand']} | {r['found']} | {100 * r['recall']:.0f}% | "
                  f"{100 * r['precision']:.0f}% | {r['edits']} | {0 if r['consistent'] else 'inconsistent'} |")
        for r in rows:
            print(f"\n{r['repo']}: missed {', '.join(r['missed']) or 'none'}"
                  + (f" ({r['missed_by_category']})" if r["missed"] else "")
                  + f"; reported beyond the hand list: {', '.join(r['extra']) or 'none'}"
                  + (f"; reported on lines the reader marked borderline: {', '.join(r['borderline_reported'])}" if r["borderline_reported"] else ""))
    else:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
