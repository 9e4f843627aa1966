"""`npuport bench`: its options and help, the checks that need no model, and the first progress line; the
benchmark itself runs in npuport.cli.bench_impl, imported (with torch) only after that line is out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from npuport.bench.emitted import earlier_scripts
from npuport.cli.common import check_new, check_out_dir, handle_errors, say
from npuport.cli.lazy import Command
from npuport.cli.options import (
    attn_option,
    chip_option,
    deprecated,
    not_negative,
    quiet_debug,
    report_options,
    scenario_option,
    wide_option,
)
from npuport.cost.roofline import get_chip
from npuport.errors import NpuportError
from npuport.model.scenarios import DEFAULTS, parse_scenarios

CANDIDATES = ("eager", "compile", "graph", "alt")
FORMATS = ("text", "json")


def candidates(text: str) -> set[str] | None:
    """--candidates: None for auto, else the set asked for (eager always in)."""
    if text == "auto":
        return None
    got = {t.strip() for t in text.split(",") if t.strip()}
    bad = got - set(CANDIDATES)
    if bad:
        raise NpuportError(f"unknown candidate(s) {', '.join(sorted(bad))}", "a comma list of " + ", ".join(CANDIDATES) + ", or auto", text)
    return got | {"eager"}


@click.command("bench", cls=Command, impl="npuport.cli.bench_impl:bench")
@click.argument("model", required=False)
@click.option("--hf", "hf_config", metavar="CONFIG.json", help="A Hugging Face architecture from its config.json (random weights).")
@click.option("--from", "audit_json", metavar="AUDIT.json", help="Benchmark from an audit JSON alone (npuport audit --format json).")
@click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model.")
@scenario_option(f"prefill ({DEFAULTS['prefill'].spec()}); with --from, the audit JSON's first scenario at its sizes "
                 "(a name alone, or with the audit's own sizes: they come from the JSON)")
@click.option("--ops", type=click.IntRange(min=1), metavar="N", help="Benchmark the N costliest ops of the scenario (default: its hot ops).")
@click.option("--shapes", default=3, show_default=True, help="Input shapes per op, costliest first.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda[:i] or npu[:i].")
@chip_option(None, "detected from the device name")
@click.option("--dtype", help="Model dtype for --hf builds.")
@attn_option
@click.option("--reps", default=50, show_default=True, help="Timed repetitions per candidate (at most).")
@click.option("--warmup", default=10, show_default=True, help="Untimed calls before timing.")
@click.option("--budget", "budget_s", default=0.5, show_default=True, callback=not_negative, help="Seconds of timed calls per candidate; slow ops get fewer reps (never under 5).")
@click.option("--rotate-mb", default=256, show_default=True, callback=not_negative, help="Rotate input sets until they span this many MiB (defeats cache reuse).")
@click.option("--candidates", "cands", default="auto", show_default=True, help="Comma list of eager, compile, graph, alt (registered alternatives); auto: all but graph (cpu: no compile).")
@click.option("--graph-below-us", default=20.0, show_default=True, callback=not_negative, help="With the graph candidate: capture only ops under this eager time.")
@click.option("--pin-cpu", type=int, metavar="CORE", help="Pin the launching thread to one CPU core.")
@click.option("--kernel-check/--no-kernel-check", default=True, show_default=True, help="Record kernel names under the profiler and check the expected path.")
@click.option("--e2e/--no-e2e", default=True, show_default=True, help="Time the whole step (model with random weights on the device) against the sum of its ops.")
@click.option("--e2e-ops", default="all", show_default=True, type=click.Choice(["all", "benched"]), help="Sum over every op of the step (timed eager) or only the benchmarked ones plus estimates.")
@click.option("--emit", "emit_dir", metavar="DIR", help="Write one standalone repro script per benchmarked case into DIR.")
@report_options(FORMATS)
@wide_option
@click.option("--fail-on-kernel-path", is_flag=True, help="Exit 1 when an op did not take its expected kernel path.")
@deprecated("--top", "top", type=int, use="--ops", into="ops",
            note="in bench --top N meant --ops N, the N costliest ops benchmarked; --top now means rows shown in tables")
@quiet_debug
@handle_errors
def bench(model: str | None, hf_config: str | None, audit_json: str | None, scenario: str | None, chip: str | None,
          reps: int, warmup: int, shapes: int, cands: str, output: str | None, json_out: str | None, force: bool,
          quiet: bool, **_: Any) -> None:
    """Microbenchmark the audit's hot ops with their recorded shapes and dtypes on the current device: median
    and spread, achieved TFLOP/s or GB/s against the chip's roofline, the kernel each op ran, eager vs
    torch.compile vs registered alternatives, and the whole step against the sum of its ops.

    MODEL is a model.py (docs/model-files.md); or --hf CONFIG.json; or --from an audit JSON. Clocks and power
    settings are only read, never changed.

    \b
    Examples:
      npuport bench examples/gpt/model.py --scenario prefill:batch=1,seq=512 --ops 5
      npuport bench --hf examples/configs/tinyllama-1.1b.json --device cuda --ops 10 --json-out bench.json
      npuport audit model.py --format json -o audit.json && npuport bench --from audit.json --scenario decode
    """
    if sum(x is not None for x in (model, hf_config, audit_json)) != 1:  # before "loading ..." names one of them
        raise NpuportError("give exactly one source", "MODEL (a model.py), --hf CONFIG.json or --from AUDIT.json",
                           f"MODEL={model!r}, --hf={hf_config!r}, --from={audit_json!r}")
    if reps < 1 or warmup < 0 or shapes < 1:
        raise NpuportError("bad repetition options", "--reps >= 1, --warmup >= 0, --shapes >= 1", f"--reps {reps} --warmup {warmup} --shapes {shapes}")
    check_new([output, json_out], force, inputs=[model, hf_config, audit_json])
    check_emit(_.get("emit_dir"), force)
    candidates(cands)
    if scenario is not None:
        if audit_json is not None and ":" in scenario:
            if _audited_as(audit_json, scenario) is False:
                raise NpuportError("with --from the scenario's sizes come from the audit JSON",
                                   "--scenario NAME alone (train, prefill or decode), or with the audit's own sizes",
                                   scenario)
            scenario = scenario.partition(":")[0]  # the audit's own sizes, written out: the same step
        if len(parse_scenarios([scenario])) != 1:
            raise NpuportError("bench takes one scenario", "--scenario NAME[:batch=N,seq=N,past=N], one of train, prefill, decode", scenario)
    if chip is not None:
        get_chip(chip)
    say(quiet, f"loading {model or hf_config or audit_json}")


def _audited_as(audit_json: str, text: str) -> bool | None:
    """Whether `text` (NAME:sizes) is the step the audit JSON traced under that name: same batch, seq, past and mode.
    None where the JSON cannot be read or has no such step: the loader then says so in its own line."""
    (sc,) = parse_scenarios([text])  # a malformed --scenario is the user's: its own one-line error
    try:
        data = json.loads(Path(audit_json).read_text(encoding="utf-8"))
        got = next(s for s in data["scenarios"] if s["name"] == sc.name)
        return all(got.get(k) == v for k, v in (("batch", sc.batch), ("seq", sc.seq), ("past", sc.past))) \
            and (got.get("step") or {}).get("mode", "eager") == sc.mode
    except (OSError, ValueError, KeyError, TypeError, StopIteration, AttributeError):
        return None


def check_emit(emit_dir: str | None, force: bool) -> None:
    """--emit DIR writes one script per case: never into a file, and never over scripts already there (a user may
    have edited them) unless --force."""
    check_out_dir(emit_dir, "--emit")  # the scripts have their own names: inputs beside them are safe
    if not emit_dir or force or not Path(emit_dir).is_dir():
        return
    earlier = [p.name for p in earlier_scripts(emit_dir)]
    if earlier:
        raise NpuportError(f"--emit {emit_dir} already holds repro scripts of an earlier run ({', '.join(earlier[:3])}"
                           + (", ..." if len(earlier) > 3 else "") + ")", "a folder without them, or --force to "
                           "replace them", emit_dir)

