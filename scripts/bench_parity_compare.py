#!/usr/bin/env python3
"""`npuport parity compare` throughput on the CPU: two recorded artifacts against each other.

Target (issue 25): full-tensor artifacts compared at >= 1 GB/s per side; a stats-only record with as many entries as a
Llama-2-7B forward (about 6,000) compared in under a second.

What it does, in a temp folder (or --scratch), removed at the end:
1. a manifest template from a real record of a tiny Llama (the project's `record`), so every field the compare path
   reads is the one a record writes;
2. two full-tensor artifacts of --gb GB each (activation-shaped tensors, mostly bfloat16 with some float32; the dev
   side is the reference times (1 + noise) at the dtype's rounding level, two tensors with NaN / Inf at the same few
   positions on both sides), written with `save_artifact`;
3. the anchor: the same files read with a plain `readinto` loop (warm page cache: what any compare must at least do),
   and the sha256 the loader checks each file against;
4. compare wall time, median of --repeats after a warm-up read: `npuport parity compare --ref A --dev B` in this
   process (the click command: load, compare, JSON form, text report), once with `--verify always` (every file
   hashed against the manifest: a first compare of records new to this machine) and once as every later compare
   runs it (the files' hashes checked once already: npuport.parity.verified), and the library's `compare()` on
   loaded artifacts alone;
5. a stats-only pair of --entries entries (32 layers of module entries, the rest op entries), through the same
   command; cProfile of one run with --profile.

Usage: python scripts/bench_parity_compare.py [--gb 1.0] [--entries 6000] [--repeats 3] [--json OUT] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import hashlib
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from npuport.cli.main import cli  # noqa: E402
from npuport.parity import artifact as parity_artifact  # noqa: E402
from npuport.parity.artifact import load_artifact, save_artifact  # noqa: E402
from npuport.parity.compare import compare  # noqa: E402
from npuport.parity.entries import Capture, CaptureOptions, Entry  # noqa: E402
from npuport.parity.run import record  # noqa: E402
from npuport.parity.session import RunOptions, Target  # noqa: E402
from npuport.parity.stats import StatsBatcher  # noqa: E402
from npuport.parity.tolerances import load_tolerances  # noqa: E402

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 256,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
# One decoder layer's captured outputs at batch 1 x SEQ on a ~1B Llama shape: (module, last dim, dtype).
SEQ, HIDDEN, INTER, HEADS = 2048, 2048, 5632, 16
LAYER = [("input_layernorm", HIDDEN, torch.bfloat16), ("self_attn.q_proj", HIDDEN, torch.bfloat16),
         ("self_attn.k_proj", HIDDEN // 4, torch.bfloat16), ("self_attn.v_proj", HIDDEN // 4, torch.bfloat16),
         ("self_attn.scores", None, torch.float32), ("self_attn.o_proj", HIDDEN, torch.bfloat16),
         ("self_attn", HIDDEN, torch.bfloat16), ("post_attention_layernorm", HIDDEN, torch.bfloat16),
         ("mlp.gate_proj", INTER, torch.bfloat16), ("mlp.act_fn", INTER, torch.bfloat16),
         ("mlp.up_proj", INTER, torch.bfloat16), ("mlp.down_proj", HIDDEN, torch.bfloat16),
         ("mlp", HIDDEN, torch.bfloat16), ("", HIDDEN, torch.bfloat16)]
NOISE = {torch.bfloat16: 2.0 ** -9, torch.float16: 2.0 ** -12, torch.float32: 1e-6}


def template_manifest(scratch: Path) -> dict[str, Any]:
    """The manifest of a real record (tiny Llama on the CPU), less what save_artifact writes itself."""
    cfg = scratch / "tiny-llama.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    path = record(Target(hf_config=str(cfg)), "cpu", RunOptions(scenario="prefill:batch=1,seq=8",
                                                                capture=CaptureOptions(op_sequence=False)), str(scratch / "tiny"))
    manifest = json.loads((path / "manifest.json").read_text())
    shutil.rmtree(path)
    for key in ("entries", "files", "calls", "schema", "complete", "capture_mode"):
        manifest.pop(key, None)
    manifest["weights"]["stored"] = False
    return manifest


def _layer_shapes(layers: int) -> Iterator[tuple[str, tuple[int, ...], torch.dtype]]:
    for i in range(layers):
        for name, last, dtype in LAYER:
            path = f"model.layers.{i}" + (f".{name}" if name else "")
            shape = (1, HEADS // 4, SEQ // 4, SEQ) if last is None else (1, SEQ, last)
            yield path, shape, dtype


def full_pair(gb: float, seed: int = 0) -> tuple[Capture, Capture]:
    """Activation-shaped tensors up to `gb` GB per side; the dev side within tolerance of the reference."""
    gen = torch.Generator().manual_seed(seed)
    entries: list[Entry] = []
    ref: dict[int, torch.Tensor] = {}
    dev: dict[int, torch.Tensor] = {}
    total, limit = 0, int(gb * 1e9)
    for blob, (path, shape, dtype) in enumerate(_layer_shapes(10_000)):
        if total >= limit:
            break
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        d = r * (1 + NOISE[dtype] * torch.randn(shape, generator=gen, dtype=torch.float32))
        if blob in (3, 40):  # a few non-finite values, at the same positions on both sides: equal
            for t in (r, d):
                t.view(-1)[[17, 1_000_003]] = float("nan")
                t.view(-1)[-5] = float("inf")
        ref[blob], dev[blob] = r.to(dtype), d.to(dtype)
        total += ref[blob].nbytes
        entries.append(Entry(f"{path}#0:out", path, 0, "out", "", shape, str(dtype).removeprefix("torch."), blob, blob))
    return _capture("full", entries, ref), _capture("full", entries, dev)


def _capture(mode: str, entries: list[Entry], full: dict[int, torch.Tensor], stats: Any = None) -> Capture:
    return Capture(mode, entries, full, stats if stats is not None else {}, {}, [], None)


def stats_pair(n_entries: int, seed: int = 0) -> tuple[Capture, Capture]:
    """A stats-only record the size of a Llama-2-7B forward with --ops: 32 layers of module in/out entries, op entries
    for the rest; statistics from StatsBatcher over small random tensors (the dev side perturbed by 1e-3)."""
    gen = torch.Generator().manual_seed(seed)
    mods = [f"model.layers.{i}.{m}" for i in range(32) for m in
            ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn",
             "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.act_fn", "mlp.down_proj", "mlp", "")]
    keys: list[tuple[str, str, str, str | None]] = []
    for m in mods:
        path = m.rstrip(".")
        keys += [(f"{path}#0:in.0", path, "in", None), (f"{path}#0:out", path, "out", None)]
    ops = ("aten::mm", "aten::mul.Tensor", "aten::add.Tensor", "aten::silu", "aten::_softmax", "aten::pow.Tensor_Scalar")
    i = 0
    while len(keys) < n_entries:
        path = mods[i % len(mods)].rstrip(".")
        op = ops[i % len(ops)]
        keys.append((f"{path}#0/{op}#{i // len(mods)}:out", path, "op", op))
        i += 1
    sides = [StatsBatcher(budget_bytes=64 << 20, fused=False), StatsBatcher(budget_bytes=64 << 20, fused=False)]
    entries = []
    for blob, (key, module, io_, name) in enumerate(keys):
        t = torch.randn(4096, generator=gen, dtype=torch.float32)
        sides[0].add(blob, t.to(torch.bfloat16))
        sides[1].add(blob, (t * (1 + 1e-3 * torch.randn(4096, generator=gen))).to(torch.bfloat16))
        entries.append(Entry(key, module, 0, io_, ".0" if io_ == "in" else "", (1, 4096), "bfloat16", blob, blob, name))
    return _capture("stats", entries, {}, sides[0].finish()), _capture("stats", entries, {}, sides[1].finish())


def write(folder: Path, manifest: dict[str, Any], cap: Capture) -> Path:
    body = dict(manifest, capture=dict(manifest["capture"], mode=cap.mode))
    return save_artifact(folder, body, cap, [], None)


def tensor_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix == ".safetensors")


def read_all(files: list[Path], block: int = 16 << 20) -> int:
    """The anchor: every byte of the files through a plain read loop into one reused buffer."""
    buf = bytearray(block)
    view = memoryview(buf)
    total = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


def sha256_all(files: list[Path]) -> None:
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 24), b""):
                h.update(chunk)


def _cpu_seconds() -> tuple[float, float]:
    """(seconds every CPU of the machine was busy, seconds this process and its children were)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    t = os.times()
    busy = sum(fields[:8]) - fields[3] - fields[4]  # less idle and iowait; guest time is already in user
    return busy / tick, t.user + t.system + t.children_user + t.children_system


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """Median of `repeats` runs, and the CPU time other processes took meanwhile (the machine is shared: a busy
    core slows torch's threaded operations far more than its share)."""
    times = []
    busy0, own0 = _cpu_seconds()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    busy1, own1 = _cpu_seconds()
    return {"median_s": statistics.median(times), "all_s": [round(t, 4) for t in times],
            "other_cpu_s": round(max(0.0, (busy1 - busy0) - (own1 - own0)), 2), "wall_s": round(sum(times), 2)}


def run_command(ref: Path, dev: Path, out: Path, verify: str = "once") -> Callable[[], None]:
    """`npuport parity compare --ref REF --dev DEV --json-out OUT --verify MODE` in this process (text report to
    stdout)."""
    args = ["parity", "compare", "--ref", str(ref), "--dev", str(dev), "--json-out", str(out), "--force", "--quiet",
            "--verify", verify]

    def go() -> None:
        res = CliRunner().invoke(cli, args, catch_exceptions=False)
        if res.exit_code != 0:
            raise SystemExit(f"compare exited {res.exit_code}: {res.output[-2000:]}")
    return go


_AFTER_IMPORTS = """
import sys, time
t0 = time.perf_counter()
from click.testing import CliRunner
import npuport.cli.parity_impl  # what the command imports before it starts: torch, the API, the renderers
from npuport.cli.main import cli
t1 = time.perf_counter()
res = CliRunner().invoke(cli, sys.argv[1:], catch_exceptions=False)
assert res.exit_code == 0, res.output[-2000:]
print(t1 - t0, time.perf_counter() - t1)
"""


def fresh_process(ref: Path, dev: Path, out: Path | None) -> tuple[float, float, float]:
    """The command in a new interpreter (no heap left by this script for the garbage collector to walk), its text
    report (and with `out`, the JSON report written there too): seconds of imports, seconds after them, in all."""
    extra = ["--json-out", str(out), "--force"] if out is not None else []
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _AFTER_IMPORTS, "parity", "compare", "--ref", str(ref), "--dev", str(dev),
                          "--quiet", *extra], check=True, capture_output=True, text=True, cwd=ROOT)
    total = time.perf_counter() - t0
    imports, work = (float(v) for v in res.stdout.split()[-2:])
    return imports, work, total


def library_compare(ref: Path, dev: Path) -> Callable[[], None]:
    tols = load_tolerances()

    def go() -> None:
        a, b = load_artifact(ref, verify=False), load_artifact(dev, verify=False)
        if not compare(a.capture, b.capture, tols):
            raise SystemExit("the synthetic pair should pass")
    return go


def profile_top(fn: Callable[[], Any], lines: int = 18) -> str:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(lines)
    return out.getvalue()


def measure_full(scratch: Path, manifest: dict[str, Any], gb: float, repeats: int) -> dict[str, Any]:
    ref_cap, dev_cap = full_pair(gb)
    ref, dev = write(scratch / "full_ref", manifest, ref_cap), write(scratch / "full_dev", manifest, dev_cap)
    del ref_cap, dev_cap
    files = [tensor_files(ref), tensor_files(dev)]
    per_side = sum(f.stat().st_size for f in files[0])
    # the first compare right after recording both on this machine (the files are in the page cache, just written):
    # it skips hashing a file whose recorder stamp is trusted (npuport.parity.verified: at once where the filesystem
    # keeps sub-second times, 2 s after the write where it keeps seconds), else it hashes; one run, since it stamps
    # what it hashed
    hashed: list[str] = []
    real_sha = parity_artifact._sha256
    parity_artifact._sha256 = lambda path: hashed.append(path.name) or real_sha(path)  # type: ignore[assignment]
    try:
        just_recorded = timed(run_command(ref, dev, scratch / "full.json"), 1)
    finally:
        parity_artifact._sha256 = real_sha  # type: ignore[assignment]
    just_recorded["files_hashed"] = len(hashed)
    read_all(files[0] + files[1])  # warm-up: both sides in the page cache
    anchor = timed(lambda: read_all(files[0] + files[1]), repeats)
    sha = timed(lambda: sha256_all(files[0] + files[1]), repeats)
    # every file hashed, as a first compare of records new to this machine does
    first = timed(run_command(ref, dev, scratch / "full.json", verify="always"), repeats)
    # the default (`--verify once`): the files were written seconds ago; one run stamps them as checked (see
    # npuport.parity.verified: a stamp counts when taken a racy window (at most 2 s) after the file's last change), the timed runs
    # then compare without hashing, as every compare after the first does
    while time.time() - max(f.stat().st_ctime for f in files[0] + files[1]) < 2.5:
        time.sleep(0.1)
    run_command(ref, dev, scratch / "full.json")()
    cmd = timed(run_command(ref, dev, scratch / "full.json"), repeats)
    lib = timed(library_compare(ref, dev), repeats)
    report = json.loads((scratch / "full.json").read_text())
    rate = lambda t: per_side / t / 1e9  # noqa: E731
    return {"bytes_per_side": per_side, "entries": len(report["entries"]), "verdict": report["verdict"]["text"],
            "read_anchor": dict(anchor, GB_per_s_per_side=rate(anchor["median_s"])),
            "sha256": dict(sha, GB_per_s_per_side=rate(sha["median_s"])),
            "command_first": dict(first, GB_per_s_per_side=rate(first["median_s"])),
            "command_just_recorded": dict(just_recorded, GB_per_s_per_side=rate(just_recorded["median_s"])),
            "command": dict(cmd, GB_per_s_per_side=rate(cmd["median_s"])),
            "library_compare": dict(lib, GB_per_s_per_side=rate(lib["median_s"]))}


def measure_stats(scratch: Path, manifest: dict[str, Any], n_entries: int, repeats: int, profile: bool) -> dict[str, Any]:
    ref_cap, dev_cap = stats_pair(n_entries)
    ref, dev = write(scratch / "stats_ref", manifest, ref_cap), write(scratch / "stats_dev", manifest, dev_cap)
    go = run_command(ref, dev, scratch / "stats.json")
    go()  # warm-up
    cmd = timed(go, repeats)
    lib = timed(library_compare(ref, dev), repeats)
    fresh = [fresh_process(ref, dev, None) for _ in range(repeats)]
    with_json = [fresh_process(ref, dev, scratch / "stats.json") for _ in range(repeats)]
    report = json.loads((scratch / "stats.json").read_text())
    after = lambda runs: {"median_s": statistics.median(f[1] for f in runs), "all_s": [round(f[1], 4) for f in runs]}  # noqa: E731
    out = {"entries": len(report["entries"]), "verdict": report["verdict"]["text"], "command": cmd, "library_compare": lib,
           "fresh_after_imports": after(fresh), "fresh_json_after_imports": after(with_json),
           "fresh_imports_s": statistics.median(f[0] for f in fresh), "fresh_total_s": statistics.median(f[2] for f in fresh)}
    if profile:
        out["profile"] = profile_top(go)
    return out


def machine() -> dict[str, Any]:
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "python": platform.python_version(), "date": datetime.date.today().isoformat()}


def markdown(res: dict[str, Any]) -> str:
    f, s = res["full"], res["stats"]
    gb = f["bytes_per_side"] / 1e9
    rows = [("plain read of both sides' files (anchor, warm page cache)", f["read_anchor"]),
            ("sha256 of both sides' files (the loader's hash check)", f["sha256"]),
            ("`npuport parity compare --ref A --dev B --verify always` (in process; every file hashed, as a first "
             "compare of records new to this machine)", f["command_first"]),
            ("`npuport parity compare --ref A --dev B` right after both were recorded here (one run; the recorder's own "
             "stamps count at once where file times are sub-second, else 2 s after the write; files it hashed: "
             f"{f['command_just_recorded'].get('files_hashed', '?')})", f["command_just_recorded"]),
            ("`npuport parity compare --ref A --dev B` (in process; the files checked before on this machine)",
             f["command"]),
            ("library: load (no hash check) + `compare()`", f["library_compare"])]
    lines = [f"Full tensors: {gb:.2f} GB per side, {f['entries']} entries; {f['verdict']}", "",
             "| step | median | runs | GB/s per side | other processes' CPU |", "|---|---:|---|---:|---:|"]
    lines += [f"| {name} | {r['median_s']:.2f} s | {r['all_s']} | {r['GB_per_s_per_side']:.2f} | "
              f"{r['other_cpu_s']:.1f} s of {r['wall_s']:.1f} s |" for name, r in rows]
    fresh, with_json = s["fresh_after_imports"], s["fresh_json_after_imports"]
    lines += ["", f"Stats only: {s['entries']} entries; {s['verdict']}", "",
              "| step | median | runs | other processes' CPU |", "|---|---:|---|---:|",
              f"| `npuport parity compare --ref A --dev B`, fresh process, after imports | {fresh['median_s']:.3f} s | "
              f"{fresh['all_s']} | - |",
              f"| the same with `--json-out F` | {with_json['median_s']:.3f} s | {with_json['all_s']} | - |",
              f"| `... --json-out F` in this process (its heap included) | {s['command']['median_s']:.3f} s | {s['command']['all_s']} | "
              f"{s['command']['other_cpu_s']:.1f} s of {s['command']['wall_s']:.1f} s |",
              f"| library: load + `compare()` | {s['library_compare']['median_s']:.3f} s | {s['library_compare']['all_s']} | "
              f"{s['library_compare']['other_cpu_s']:.1f} s of {s['library_compare']['wall_s']:.1f} s |",
              "", f"Fresh process in all: {s['fresh_total_s']:.2f} s (imports {s['fresh_imports_s']:.2f} s, median)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="GB of tensors per side")
    ap.add_argument("--entries", type=int, default=6000, help="entries of the stats-only record (at least its 832 module entries)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--scratch", help="folder for the artifacts (default: a temp dir; removed either way)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one stats-only compare")
    ap.add_argument("--skip-full", action="store_true", help="the stats-only measurement only")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-parity-compare-", dir=args.scratch))
    os.environ["NPUPORT_CACHE_DIR"] = str(scratch / "cache")  # the stamps of checked files: this run's own
    need = 0 if args.skip_full else int(2.2 * args.gb * 1e9)  # two artifacts, and their staging on the same disk
    if shutil.disk_usage(scratch).free < need:
        shutil.rmtree(scratch, ignore_errors=True)
        raise SystemExit(f"{scratch.parent}: {need / 1e9:.1f} GB free needed for --gb {args.gb}")
    try:
        manifest = template_manifest(scratch)
        res: dict[str, Any] = {"machine": machine()}
        if not args.skip_full:
            res["full"] = measure_full(scratch, manifest, args.gb, args.repeats)
        res["stats"] = measure_stats(scratch, manifest, args.entries, args.repeats, args.profile)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.profile:
        print(res["stats"]["profile"])
    if "full" in res:
        print(markdown(res))
    else:
        s = res["stats"]
        print(f"stats only: {s['entries']} entries, fresh process after imports {s['fresh_after_imports']['median_s']:.3f} s "
              f"{s['fresh_after_imports']['all_s']}, with --json-out {s['fresh_json_after_imports']['median_s']:.3f} s, "
              f"in this process {s['command']['median_s']:.3f} s, "
              f"library {s['library_compare']['median_s']:.3f} s, fresh process in all {s['fresh_total_s']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
