#!/usr/bin/env python3
"""Start-up time of the CLI (docs/cli.md): median wall time of `npuport --help`, `npuport audit --help`, and the time
to the first stderr line of an audit, over N runs, for the checkout at --root (default: this one; pass another
checkout, e.g. a `git worktree` of an older commit, to measure "before").
Usage: python scripts/bench_startup.py [--root DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def whole(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - t0


def first_line(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    p.stderr.readline()
    t = time.perf_counter() - t0
    p.kill()
    p.wait()
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    cli = [sys.executable, "-m", "npuport.cli.main"]
    os.environ["PYTHONPATH"] = str(a.root)
    rows = [("npuport --help", whole, cli + ["--help"]),
            ("npuport audit --help", whole, cli + ["audit", "--help"]),
            ("first stderr line of npuport audit examples/gpt/model.py", first_line, cli + ["audit", "examples/gpt/model.py"]),
            ("whole npuport audit examples/gpt/model.py", whole, cli + ["audit", "examples/gpt/model.py"])]
    for label, fn, cmd in rows:
        times = [fn(cmd, a.root) for _ in range(a.repeats)]
        print(f"| {label} | {statistics.median(times):.2f} s |")


if __name__ == "__main__":
    main()
