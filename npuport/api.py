"""The Python facade: one function per thing the CLI does, each taking an options dataclass, so everything the CLI
does can be done from Python. The CLI parses flags into these options, calls one function and renders the result.
Only npuport.cli imports this module; nothing below it in the layers does.

    audit(ModelSpec, AuditOptions)            -> (AuditReport, its JSON form)
    static_scan(path, suppress)               -> ScanReport
    migrate(path, MigrateOptions)             -> Program (the diff, nothing written); write_migration(program, force)
    coverage_show / coverage_diff / coverage_list
    parity_run / parity_compare(ref, dev, ModelSpec | None, ParityOptions) -> ParityResult; parity_record -> its directory
    bench(BenchSource, BenchRun)              -> (BenchReport, its JSON form)
    profile_import(trace path)                -> the profile artifact (npuport.profile/1); audit joins it with --profile
    profile_record(ModelSpec, RecordOptions)  -> one Recorded (artifact + raw trace) per scenario, run for real
    profile_compare(base, new, audit json)    -> the two profiles side by side (npuport.profile-compare/1)
"""

from __future__ import annotations

import contextlib
import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from npuport import coverage
from npuport.audit.collector import collector_paused
from npuport.audit.json_form import audit_to_json
from npuport.audit.pipeline import run_audit
from npuport.audit.report import AuditReport
from npuport.bench.harness import BenchOptions
from npuport.bench.json_form import bench_to_json
from npuport.bench.runner import BenchReport, run_bench
from npuport.cost.host_probe import check_host_probe
from npuport.cost.inventory import GraphInputs
from npuport.cost.roofline import ChipProfile, default_baseline, default_chip, get_baseline_chip, get_chip, load_chips
from npuport.cost.timing import host_probe as host_speed
from npuport.cost.timing import reference_probe_s
from npuport.coverage import STATUSES
from npuport.coverage.database import VersionChoice, resolve_version
from npuport.coverage.diff import CoverageDiff, diff_versions
from npuport.coverage.resolve import Resolution
from npuport.devices.device import NumericsPolicy
from npuport.errors import NpuportError
from npuport.fusion.routes import weights
from npuport.model.distributed import distribute, fake_world
from npuport.model.job import Layout, check_dtype_name, check_training, job
from npuport.model.loading import LoadedModel, load_target
from npuport.model.scenarios import Scenario, parse_scenario, parse_scenarios
from npuport.parity.entries import CaptureOptions
from npuport.parity.json_form import to_json as parity_to_json
from npuport.parity.run import ParityResult, is_artifact_path, record, run_parity
from npuport.parity.session import RunOptions, Target
from npuport.parity.tolerances import load_tolerances
from npuport.parity.verified import verification
from npuport.profile.artifact import import_trace, is_artifact, load_artifact
from npuport.profile.compare import compare as _compare_profiles
from npuport.profile.host_speed import at_recorded_host
from npuport.profile.join import join as join_profile
from npuport.profile.npu_profiler import export_path
from npuport.profile.record import Recorded, npu_side, record_scenario, resolve_device
from npuport.profile.record import host_probe as probe_once
from npuport.rules import fail_on
from npuport.rules import suppress as _suppress
from npuport.scan.migrate import Program, migrate_program
from npuport.scan.migrate import write_migration as _write_one
from npuport.scan.source_scan import ScanReport, scan

Progress = Callable[[str], None] | None


@dataclass(frozen=True)
class ModelSpec:
    """The model a user names: a model.py (optionally file.py:function via `entry`) or a Hugging Face config."""

    model: str | None = None
    hf_config: str | None = None
    entry: str | None = None
    dtype: str | None = None
    attn: str | None = None
    part: str = "text"  # a composite (multimodal) config: its text decoder, or "full"


@dataclass(frozen=True)
class AuditOptions:
    scenarios: tuple[str, ...] = ()  # default: train, prefill, decode
    chip: str = field(default_factory=default_chip)  # mappings/hardware.yaml default_target
    baseline_chip: str = field(default_factory=default_baseline)  # the CUDA chip the model comes from (default_baseline)
    torch_npu: str | None = None
    route_preset: str = "default"
    route_weights: str | None = None
    suppress: tuple[str, ...] = ()
    reproducibility: bool = False
    optimizer: str | None = None  # the training step's optimizer, for its memory (default: mappings/memory.yaml)
    master_weights: bool = False  # mixed precision: a float32 copy of the weights and float32 optimizer states
    profiles: tuple[str, ...] = ()  # profile artifacts (npuport profile import / record) to join to the estimate
    profile_scenario: str | None = None  # the scenario they measured (default: the one an artifact records, else
    # prefill, else the first audited)
    world_size: int | None = None  # trace one rank of this many under the fake process group (docs/scale-out.md)
    rank: int = 0
    parallel: str | None = None  # a standard layout: "tp=8,dp=4,zero=3" (ep=, pp= estimated)
    reuse: bool = True  # record one of each set of identical decoder layers and copy its records (npuport.trace.reuse)
    # this host's speed: seconds per tiny eager op (`npuport profile probe`); the CUDA chips' host costs are scaled
    # to it (mappings/timing.yaml fits them at `reference_probe_s`); None: the reference host's
    host_probe: float | None = None


def audit(spec: ModelSpec, opts: AuditOptions | None = None, progress: Progress = None) -> tuple[AuditReport, dict[str, Any]]:
    """Run the audit and return the report object and its JSON form (schema npuport.audit/1)."""
    opts = opts or AuditOptions()
    chip, parsed, layout, ranks = check_audit_options(spec, opts)  # reject bad options before loading anything
    weights(opts.route_preset, opts.route_weights)
    release = resolve_version(opts.torch_npu) if opts.torch_npu is not None else None  # nearest earlier data, or exit 2
    if release is not None:
        opts = replace(opts, torch_npu=release.data)
    measured = [_profile_at(p) for p in opts.profiles]  # a bad profile fails before the model loads
    if opts.suppress:
        _suppress([], list(opts.suppress))  # reject a malformed pattern before the audit runs
    # every chip's host costs by the same factor: the step-time ratio compares the chips on one host, not two
    probe = {"cuda": opts.host_probe, "npu": opts.host_probe} if opts.host_probe else None
    with collector_paused(), (host_speed(probe) if probe else contextlib.nullcontext()):
        report, data = _audit_paused(spec, opts, chip, parsed, measured, layout, ranks, release, progress)
    return report, data


def _host_probe_note(probe: float, chip: ChipProfile, baseline: str) -> str:
    ref = reference_probe_s(get_baseline_chip(baseline))
    fit = f"; they were fit on a host reading {ref * 1e6:.1f} us" if ref else ""
    npu = (f"; {chip.name}'s are scaled by the same factor, its server's host taken as fast as this one (no NPU host "
           "probe is lent here: `npuport profile probe --dev npu` on the NPU server says how it compares)"
           if chip.family != "cuda" else "")
    return (f"host: every chip's host costs are scaled to this host, whose probe reads {probe * 1e6:.1f} us per tiny "
            f"eager op (--host-probe){fit}{npu}")


def check_audit_options(spec: ModelSpec, opts: AuditOptions) -> tuple[ChipProfile, list[Scenario], Layout | None,
                                                                         int | None]:
    """The audit's options that need no model, each failure one line (exit 2): the chips, the scenarios, --dtype,
    the job (--parallel, --world-size, --rank) and the training step's options. Returns the target chip, the
    scenarios, the layout and the ranks of the traced process group. npuport.cli.audit makes the same checks
    (npuport.model.job, torch-free) before its first progress line."""
    chip = get_chip(opts.chip)
    get_baseline_chip(opts.baseline_chip)
    parsed = parse_scenarios(list(opts.scenarios))
    check_dtype_name(spec.dtype)
    layout, ranks = job(opts.parallel, opts.world_size, opts.rank)
    check_training(parsed, opts.optimizer, opts.master_weights, spec.dtype)
    check_host_probe(opts.host_probe)
    return chip, parsed, layout, ranks


def _audit_paused(spec: ModelSpec, opts: AuditOptions, chip: ChipProfile, parsed: list[Scenario],
                  measured: list[dict[str, Any]], layout: Layout | None, ranks: int | None,
                  release: VersionChoice | None, progress: Progress) -> tuple[AuditReport, dict[str, Any]]:
    """The audit proper, with the collector paused (npuport.audit.collector)."""
    with fake_world(ranks, opts.rank) if ranks else contextlib.nullcontext():
        target = load_target(spec.model, spec.hf_config, spec.entry, spec.dtype, spec.attn, part=spec.part)
        if ranks:
            target.module, target.distributed = distribute(target.module, target.parallelize, layout,
                                                           opts.world_size or ranks, opts.rank)
        # master weights are a float32 copy of float16 / bfloat16 weights: of float32 weights, no copy at all
        master = opts.master_weights and target.dtype != "float32"
        report = run_audit(target, parsed, chip, torch_npu=opts.torch_npu, progress=progress,
                           baseline_chip=opts.baseline_chip, route_preset=opts.route_preset,
                           route_weights=opts.route_weights, reproducibility=opts.reproducibility,
                           suppress=list(opts.suppress), optimizer=opts.optimizer, master_weights=master,
                           reuse=opts.reuse)
        if opts.host_probe:
            report.notes.append(_host_probe_note(opts.host_probe, chip, opts.baseline_chip))
        if opts.master_weights and not master:
            report.notes.append("--master-weights has no effect: the model's weights are float32 already (no second "
                                "float32 copy is counted); give --dtype float16 or bfloat16 for a mixed-precision step")
    data = audit_to_json(report)
    if opts.host_probe:  # the CUDA chips' step times are for this host: said in the JSON, not only in a note
        data["host_probe"] = {"probe_s": opts.host_probe, "reference_probe_s": reference_probe_s(
            get_baseline_chip(opts.baseline_chip)), "scaled": sorted(n for n, c in load_chips().items() if c.family in ("cuda", "npu"))}
    if measured:
        names = [s["name"] for s in data["scenarios"]]
        joins = []
        for art in measured:
            recorded = str((art.get("scenario") or {}).get("name") or "")
            scenario = opts.profile_scenario or (recorded if recorded in names else
                                                 "prefill" if "prefill" in names or not names else names[0])
            joined = join_profile(data, art, scenario)
            _hold_at_recorded_host(joined, report, art, scenario)
            joins.append(joined)
        data["profile"] = joins
    if release is not None and release.note:
        data["notes"].append(f"torch_npu {release.requested}: {release.note}")
    return report, data


def _hold_at_recorded_host(joined: dict[str, Any], report: Any, art: dict[str, Any], scenario: str) -> None:
    """The joined step also against the estimate for the host speed the profile recorded (npuport.profile.host_speed)."""
    sc = next((s for s in report.scenarios if s.name == scenario), None)
    calls = report.inventory.calls.get(scenario)
    if sc is None or calls is None:
        return
    totals = report.inventory.totals.get(scenario)
    mode, copied = sc.mode, totals.graph_inputs if totals else GraphInputs()
    if mode == "reduce-overhead" and ((art.get("recorded") or {}).get("compile") or {}).get("cudagraph_skips_after_steps"):
        mode, copied = "compile", GraphInputs()  # torch ran the compiled graphs without replaying them (the join says so)
    at = at_recorded_host(calls, report.inventory.chip, art, mode, copied)
    step = joined["step"]
    if at is None:
        return
    step["estimated_at_host"] = at
    if step["measured"].get("step_s"):
        step["error_at_host"] = at["step_s"] / step["measured"]["step_s"] - 1.0


def _profile_at(path: str) -> dict[str, Any]:
    """A profile artifact, or anything `profile import` reads (imported on the fly)."""
    p = Path(path)
    if p.is_file() and is_artifact(p):
        return load_artifact(p)
    return import_trace(p)


def profile_compare(base: str, new: str, audit_json: str | None = None) -> dict[str, Any]:
    """Two measured profiles side by side (npuport.profile.compare); `audit_json` names the fused ops expected."""
    audit = None
    if audit_json:
        try:
            audit = json.loads(Path(audit_json).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NpuportError(f"cannot read the audit JSON {audit_json}", "a file from `npuport audit --json-out`",
                               f"{type(exc).__name__}: {exc}") from None
        if not isinstance(audit, dict) or not str(audit.get("schema", "")).startswith("npuport.audit/"):
            raise NpuportError(f"{audit_json} is not an audit JSON", "schema npuport.audit/1",
                               str(audit.get("schema") if isinstance(audit, dict) else type(audit).__name__))
    sides = _profile_at(base), _profile_at(new)
    kinds = [(side.get("scenario") or {}).get("kind") for side in sides]
    if all(kinds) and kinds[0] != kinds[1]:  # a prefill against a decode: no op or step of one stands for the other's
        raise NpuportError("the two profiles ran different scenarios", "two runs of the same scenario (train, prefill "
                           "or decode)", f"{base}: {kinds[0]}, {new}: {kinds[1]}")
    return _compare_profiles(*sides, audit)


@dataclass(frozen=True)
class RecordOptions:
    scenarios: tuple[str, ...] = ("prefill",)
    dev: str = "cpu"  # cpu | cuda[:i] | npu[:i]
    out_dir: str = "profile"
    warmup: int = 2
    steps: int = 3
    timed_steps: int = 20  # unprofiled steps whose median is the measured step (host noise needs more than a few)
    decode_cache: str = "fixed"  # fixed: every decode step the same cache length; grow: +1 token per step


def host_probe(dev: str = "auto", rounds: int = 20) -> tuple[float, str]:
    """This host's speed on `dev`: the median of `rounds` probes of 300 tiny eager adds, as `profile record` takes
    around each timed step (npuport.profile.record.host_probe); and the device it ran on."""
    if rounds < 1:
        raise NpuportError("cannot probe the host", "at least one round", str(rounds))
    if dev.split(":", 1)[0] == "npu":
        where, npu = npu_side(dev)
        label = npu.label
    else:
        where = resolve_device(dev)
        label = where
    probe_once(where, calls=300, repeats=1)  # warm: the first launches load kernels
    return statistics.median(probe_once(where, calls=300, repeats=1) for _ in range(rounds)), label


def host_probe_advice(seconds: float, where: str) -> str:
    """What the probe means for the audit's step times."""
    ref = reference_probe_s(get_baseline_chip(default_baseline())) or 0.0
    if where.startswith("npu"):
        return ("npuport's NPU host costs are the CUDA host's plus torch_npu's extra dispatch, not fit to an NPU probe "
                f"(none is lent here): this figure says how this NPU server dispatches against a CUDA host's probe "
                f"({ref * 1e6:.1f} us where the host costs were fit); `--host-probe` scales every chip by one host")
    if where == "cpu":
        return ("a CPU probe measures CPU eager dispatch only; probe the GPU host with --dev cuda for `npuport audit "
                "--host-probe`")
    return (f"npuport's host costs were fit on a host reading {ref * 1e6:.1f} us: `npuport audit ... --host-probe "
            f"{seconds * 1e6:.1f}us` estimates the eager steps for this host")


def profile_record(spec: ModelSpec, opts: RecordOptions, progress: Progress = None,
                   on_recorded: Callable[[Recorded], None] | None = None) -> list[Recorded]:
    """Run each scenario for real under torch.profiler on `opts.dev` (on an NPU, torch_npu.profiler); per scenario
    the raw trace is written to OUT_DIR/NAME.trace.json.gz (on an NPU, the profiler's export to OUT_DIR/NAME_ascend_pt)
    and the artifact returned (the CLI writes it beside)."""
    parsed = parse_scenarios(list(opts.scenarios))
    npu = None
    if opts.dev.split(":", 1)[0] == "npu":  # the Ascend profiler records it (the CPU stand-in in tests)
        dev, npu = npu_side(opts.dev)
    else:
        dev = resolve_device(opts.dev)
    # torch.profiler's schedule without a warm-up step loses the first active one (and says so in a warning)
    if opts.warmup < 1 or opts.steps < 1:
        raise NpuportError("bad step counts", "--warmup >= 1 and --steps >= 1", f"warmup {opts.warmup}, steps {opts.steps}")
    target = load_target(spec.model, spec.hf_config, spec.entry, spec.dtype, spec.attn, fake=False, part=spec.part,
                         device=dev)
    out = Path(opts.out_dir)
    if opts.decode_cache not in ("fixed", "grow"):
        raise NpuportError("bad --decode-cache", "fixed or grow", opts.decode_cache)
    if npu is not None:  # where each export will be kept, refused before anything runs
        for sc in parsed:
            export_path(out, sc.name)
    done = []
    for sc in parsed:  # each scenario handed on as it ends: a later one failing keeps the earlier ones whole
        done.append(record_scenario(target, sc, dev, out, opts.warmup, opts.steps, progress, opts.decode_cache,
                                    opts.timed_steps, npu))
        if on_recorded is not None:
            on_recorded(done[-1])
    return done


def profile_import(path: str) -> dict[str, Any]:
    """A torch.profiler / Kineto Chrome trace (.json or .json.gz) -> the profile artifact (schema npuport.profile/1)."""
    return import_trace(path)


def audit_model(model: str | None = None, hf_config: str | None = None, entry: str | None = None,
                scenarios: list[str] | None = None, chip: str | None = None, torch_npu: str | None = None,
                dtype: str | None = None, attn: str | None = None, part: str = "text", progress: Progress = None,
                route_preset: str = "default", route_weights: str | None = None,
                suppress: list[str] | tuple[str, ...] = (), reproducibility: bool = False,
                baseline_chip: str | None = None, reuse: bool = True) -> tuple[AuditReport, dict[str, Any]]:
    """`audit` with keyword arguments (scripts and notebooks)."""
    return audit(ModelSpec(model, hf_config, entry, dtype, attn, part),
                 AuditOptions(scenarios=tuple(scenarios or ()), chip=default_chip() if chip is None else chip,
                              baseline_chip=default_baseline() if baseline_chip is None else baseline_chip,
                              torch_npu=torch_npu, route_preset=route_preset, route_weights=route_weights,
                              suppress=tuple(suppress), reproducibility=reproducibility, reuse=reuse),
                 progress)


def static_scan(model: str, suppress: list[str] | tuple[str, ...] = ()) -> ScanReport:
    """Only the CUDA-API source scan of model.py and the local modules it imports (never executed)."""
    report = scan(model.split(":")[0] if ":" in model and not model.endswith(".py") else model)
    if suppress:
        report.diagnostics = _suppress(report.diagnostics, list(suppress))
    return report


@dataclass(frozen=True)
class MigrateOptions:
    root: str | None = None  # diff paths are relative to this folder (default: the current one)
    follow: bool = True  # also migrate the local modules the entry file imports


def migrate(model: str, opts: MigrateOptions = MigrateOptions()) -> Program:
    """The mechanical CUDA -> NPU edits of a program, as one diff and per-file diagnostics; nothing is written."""
    return migrate_program(model, root=opts.root, follow=opts.follow)


def write_migration(program: Program, force: bool = False) -> list[tuple[str, Path]]:
    """Write every changed file after copying its original to FILE.bak: (file, backup) per file written. Every
    backup is checked before any file is touched, so a refusal leaves the program as it was."""
    changed = [m for m in program.files if m.changed]
    clash = [m for m in changed if m.path.with_name(m.path.name + ".bak").exists()]
    if clash and not force:
        b = clash[0].path.with_name(clash[0].path.name + ".bak")
        raise NpuportError(f"backup {b} already exists", "no earlier backup, or --force to replace it", str(b))
    out = []
    for m in changed:
        backup = _write_one(m, force=force)
        if backup is not None:
            out.append((m.display, backup))
    return out


def coverage_show(op: str, version: str | None = None) -> tuple[str, list[Resolution]]:
    """(the release chosen, OP's status in every checked-in release)."""
    chosen = coverage.load(version).version
    return chosen, [coverage.resolve(op, v) for v in coverage.available_versions()]


def coverage_diff(old: str, new: str) -> CoverageDiff:
    return diff_versions(coverage.load(old).version, coverage.load(new).version)


def coverage_list(status: str, version: str | None = None) -> tuple[str, list[Resolution]]:
    """(the release, every op of it with `status`)."""
    chosen = version or coverage.default_version()
    rows = [r for r in coverage.resolve_all(chosen).values() if r.status == status]
    return coverage.load(chosen).version, rows


@dataclass(frozen=True)
class ParityOptions:
    scenario: str = "prefill:batch=1,seq=128"
    seed: int = 0
    stats_only: bool = False
    ops: bool = False
    op_sequence: bool | None = None  # default: on, off with stats_only
    backward: bool = False
    keep: tuple[str, ...] = ()
    stats_budget_mib: int | None = None
    allow_tf32: bool = False
    deterministic: bool = True
    train_mode: bool = False
    store_weights: bool | None = None  # record only; default: stored unless stats_only
    golden: str | None = None
    k: float | None = None
    rel_l2: float | None = None
    localize: bool = True
    allow_unmatched: bool = False
    verify: str = "once"  # record files against their sha256: once per file on this machine, or always

    def run_options(self) -> RunOptions:
        parse_scenario(self.scenario)  # a bad scenario is a usage error before anything loads
        seq = self.op_sequence if self.op_sequence is not None else not self.stats_only
        capture = CaptureOptions(mode="stats" if self.stats_only else "full", ops=self.ops, op_sequence=seq or self.ops,
                                 backward=self.backward or self.scenario.startswith("train"), keep=tuple(self.keep),
                                 budget_bytes=self.stats_budget_mib << 20 if self.stats_budget_mib else None)
        policy = NumericsPolicy(deterministic=self.deterministic, allow_tf32=self.allow_tf32)
        return RunOptions(scenario=self.scenario, seed=self.seed, capture=capture, policy=policy, train_mode=self.train_mode,
                          store_weights=self.store_weights)


def _target(spec: ModelSpec | None) -> Target | None:
    if spec is None:
        return None
    if spec.model and spec.hf_config:
        raise NpuportError("give one model", "MODEL (a model.py) or --hf CONFIG.json, not both", f"MODEL={spec.model!r}, --hf={spec.hf_config!r}")
    if not spec.model and not spec.hf_config:
        return None
    return Target(model=spec.model, hf_config=spec.hf_config, entry=spec.entry, dtype=spec.dtype, attn=spec.attn or "auto")


def parity_run(ref: str, dev: str, spec: ModelSpec | None, opts: ParityOptions = ParityOptions(),
               progress: Progress = None) -> tuple[ParityResult, dict[str, Any]]:
    """Compare `dev` against `ref`, each a device spec (cuda, npu, cpu, ...) or a record directory; the result and
    its JSON form (schema npuport.parity/1)."""
    target = _target(spec)
    tols = load_tolerances().with_overrides(k=opts.k, rel_l2=opts.rel_l2)
    result = run_parity(ref, dev, target, opts.run_options(), golden=opts.golden, tolerances=tols,
                        localize=opts.localize, allow_unmatched=opts.allow_unmatched, progress=progress)
    return result, parity_to_json(result)


def parity_compare(ref: str, dev: str, spec: ModelSpec | None, opts: ParityOptions = ParityOptions(),
                   progress: Progress = None) -> tuple[ParityResult, dict[str, Any]]:
    """Compare a record (`ref`, written by parity_record on another machine) against `dev`: a device to run the
    model on now (rebuilt with the record's weights and inputs), or a second record."""
    if not is_artifact_path(ref):
        raise NpuportError(f"--ref {ref!r} is not a record directory", "a directory written by `npuport parity record`", ref)
    with verification(opts.verify):
        return parity_run(ref, dev, spec, opts, progress)


def parity_record(spec: ModelSpec, dev: str, output: str, opts: ParityOptions = ParityOptions(), force: bool = False,
                  progress: Progress = None) -> Path:
    """Run the model on `dev` and write its record (manifest.json + safetensors) to `output`, atomically."""
    target = _target(spec)
    if target is None:
        raise NpuportError("no model given", "MODEL (a model.py) or --hf CONFIG.json", "nothing")
    return record(target, dev, opts.run_options(), output, force=force, progress=progress)


@dataclass(frozen=True)
class BenchSource:
    """What to benchmark: a model (audited on fake tensors first) or an audit JSON written earlier."""

    spec: ModelSpec = field(default_factory=ModelSpec)
    audit_json: str | None = None


@dataclass(frozen=True)
class BenchRun:
    scenario: str | None = None
    top: int | None = None
    shapes: int = 3
    device: str = "auto"
    chip: str | None = None
    options: BenchOptions = field(default_factory=BenchOptions)
    e2e: bool = True
    e2e_ops: str = "all"
    emit: str | None = None
    pin_cpu: int | None = None


def bench(source: BenchSource, run: BenchRun = BenchRun(), progress: Progress = None) -> tuple[BenchReport, dict[str, Any]]:
    """Benchmark the hot ops of one scenario; the report and its JSON form (schema npuport.bench/1)."""
    s = source.spec
    rep = run_bench(model=s.model, hf_config=s.hf_config, entry=s.entry, audit_json=source.audit_json, scenario=run.scenario,
                    top=run.top, shapes=run.shapes, device=run.device, chip=run.chip, dtype=s.dtype, attn=s.attn or "sdpa",
                    options=run.options, e2e=run.e2e, e2e_ops=run.e2e_ops, emit=run.emit, pin_cpu=run.pin_cpu, progress=progress)
    return rep, bench_to_json(rep)


__all__ = ["ModelSpec", "AuditOptions", "audit", "audit_model", "static_scan", "MigrateOptions", "migrate", "write_migration",
           "coverage_show", "coverage_diff", "coverage_list", "ParityOptions", "parity_run", "parity_compare", "parity_record", "BenchSource",
           "BenchRun", "BenchOptions", "bench", "fail_on", "STATUSES", "LoadedModel", "load_target"]
