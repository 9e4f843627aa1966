#!/usr/bin/env python3
"""How much parallel compute this machine really has, for the digests a record's first compare pays (issue 25):
sha256 (what a parity manifest lists), blake2b and crc32 over one in-memory buffer, in one thread, in two threads
(hashlib and zlib release the GIL on large buffers) and in two processes; and a pure-Python loop in one and in two
processes. A machine whose two processes take twice one's time has one core's throughput, whatever nproc says.

Usage: python scripts/diag_cpu_parallel.py [--mb 512] [--repeats 3] [--markdown]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import platform
import statistics
import threading
import time
import zlib
from typing import Callable

_BUF = b""


def _digest(name: str) -> None:
    if name == "crc32":
        zlib.crc32(_BUF)
    else:
        hashlib.new(name, _BUF).digest()


def _spin(_: object = None) -> None:
    x = 0
    for i in range(20_000_000):
        x += i


def _timed(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _threads(target: Callable[[], None], n: int) -> None:
    ts = [threading.Thread(target=target) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main() -> None:
    global _BUF
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    _BUF = os.urandom(a.mb << 20)
    gb = len(_BUF) / 1e9
    ctx = mp.get_context("fork")
    rows = []
    for name in ("sha256", "blake2b", "crc32"):
        one = statistics.median(_timed(lambda: _digest(name)) for _ in range(a.repeats))
        two_t = statistics.median(_timed(lambda: _threads(lambda: _digest(name), 2)) for _ in range(a.repeats))

        def procs() -> None:
            with ctx.Pool(2) as pool:
                pool.map(_digest, [name, name])
        two_p = statistics.median(_timed(procs) for _ in range(a.repeats))
        rows.append((name, gb / one, 2 * gb / two_t, 2 * gb / two_p))
    one = statistics.median(_timed(_spin) for _ in range(a.repeats))

    def spin2() -> None:
        ps = [ctx.Process(target=_spin) for _ in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
    two = statistics.median(_timed(spin2) for _ in range(a.repeats))
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}; "
          f"{a.mb} MiB buffer, median of {a.repeats}")
    print()
    print("| digest | one thread GB/s | two threads, total GB/s | two processes, total GB/s |")
    print("|---|---:|---:|---:|")
    for name, o, t, p in rows:
        print(f"| {name} | {o:.2f} | {t:.2f} | {p:.2f} |")
    print()
    print(f"pure-Python loop: one process {one:.2f} s, two at once {two:.2f} s: "
          f"{2 * one / two:.2f} cores' throughput")


if __name__ == "__main__":
    main()
