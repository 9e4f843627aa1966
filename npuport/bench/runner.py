"""`run_bench`: the bench pipeline behind `npuport bench` (npuport.api.bench calls it; the CLI parses, calls api, renders).

source (model.py / --hf config, audited now; or an audit JSON) -> cases -> harness on the device -> end-to-end
step -> repro scripts -> one `BenchReport`.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from npuport.audit.cost_stage import cost_stage
from npuport.audit.trace_stage import trace_stage
from npuport.bench.cases import BenchCase, Skipped, cases_from_report
from npuport.bench.emit import emit_scripts
from npuport.bench.endtoend import EndToEnd, time_step
from npuport.bench.from_json import cases_from_json
from npuport.bench.harness import BenchOptions, CaseResult, bench_case
from npuport.cost.roofline import default_chip, get_chip
from npuport.devices import clocks
from npuport.devices import runtime as dev
from npuport.devices.memory import free_memory
from npuport.devices.timer import Clock
from npuport.errors import NpuportError
from npuport.model.loading import load_target
from npuport.model.scenarios import parse_scenarios
from npuport.trace.compiler_logs import compiler_output

Progress = Callable[[str], None]
NOISY_SPREAD = 0.25


@dataclass
class BenchReport:
    model: dict[str, Any]
    scenario: str
    device: str
    device_name: str
    chip: str | None
    clock: str
    options: BenchOptions
    results: list[CaseResult]
    skipped: list[Skipped]
    e2e: EndToEnd | None = None
    clock_state: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    emitted: list[str] = field(default_factory=list)
    scenario_sizes: dict[str, Any] | None = None  # the step's kind, batch, seq, past and mode (Scenario.to_json)
    # the chip the per-op estimates (the op ranking, `estimate` and meas/est) are for, and why that one: it is not
    # `chip` (the roofline of the device measured) when the device has no profile or an audit JSON chose it
    estimate_chip: str | None = None
    estimate_chip_source: str = ""

    @property
    def kernel_path_failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.kernel_check is not None and not r.kernel_check]


def _load_json(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise NpuportError(f"audit JSON {p} not found", "a file written by npuport audit --format json", str(p))
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NpuportError(f"{p} is not valid JSON", "a file written by npuport audit --format json", str(exc)) from None


def _loader_from_origin(data: dict[str, Any], dtype: str | None, attn: str) -> Callable[[], Any] | None:
    info = data.get("model") or {}
    origin = info.get("origin") or ""
    if not origin or not Path(origin.split(":")[0]).is_file():
        return None
    entry = info.get("entry")  # the builder a `file.py:function` audit used (schema 1.x: absent)

    def load() -> Any:
        lm = (load_target(hf_config=origin, dtype=dtype, attn=attn, fake=False) if origin.endswith(".json")
              else load_target(model=origin, entry=entry, fake=False))
        # origin is the path as the audit was given it: from another folder it may name another model
        want = info.get("parameters")
        if isinstance(want, int) and lm.parameters != want:
            raise NpuportError(f"{origin} from here is not the audited model", f"{want:,} parameters, as audited (run "
                               "bench from the folder the audit ran in)", f"{lm.parameters:,} parameters")
        return lm

    return load


def run_bench(
    model: str | None = None, hf_config: str | None = None, entry: str | None = None, audit_json: str | None = None,
    scenario: str | None = None, top: int | None = None, shapes: int = 3, device: str = "auto", chip: str | None = None,
    dtype: str | None = None, attn: str = "sdpa", options: BenchOptions | None = None, e2e: bool = True,
    e2e_ops: str = "all", emit: str | None = None, pin_cpu: int | None = None, progress: Progress | None = None,
    clock: Clock | None = None,
) -> BenchReport:
    """Benchmark the audit's hot ops (or the `top` costliest) of one scenario on `device`."""
    opts = options or BenchOptions()
    say = progress or (lambda _m: None)
    if sum(x is not None for x in (model, hf_config, audit_json)) != 1:
        raise NpuportError("give exactly one source", "MODEL (a model.py), --hf CONFIG.json or --from AUDIT.json",
                           f"MODEL={model!r}, --hf={hf_config!r}, --from={audit_json!r}")
    if e2e_ops not in ("all", "benched"):
        raise NpuportError(f"unknown --e2e-ops {e2e_ops!r}", "all or benched", e2e_ops)
    where = dev.resolve(device)
    chip_name = chip or dev.chip_for(where)
    profile = get_chip(chip_name) if chip_name else None
    clock = clock or dev.clock_for(where)
    sync = (lambda: dev.synchronize(where)) if dev.kind_of(where) != "cpu" else None
    notes: list[str] = []
    if profile is None:
        notes.append("no chip profile for this device (pass --chip): achieved rates are shown without roofline attainment")
    if clock.kind == "host-monotonic":
        notes.append("cpu: no device events; each repetition is timed with a monotonic clock (cpu kernels run synchronously)")
    if opts.compile is None:
        opts = replace(opts, compile=dev.kind_of(where) != "cpu")
        if not opts.compile:
            notes.append("torch.compile candidate off on cpu by default (inductor builds C++ per op); ask with --candidates eager,compile,alt")

    all_cases: list[BenchCase] | None = None
    if audit_json:
        data = _load_json(audit_json)
        try:  # the audit JSON's fields read without defaults: a hand-edited or foreign file fails here in one line
            sc_name, cases, skipped = cases_from_json(data, scenario.split(":")[0] if scenario else None, top, shapes)
            model_info = dict(data.get("model") or {}, audit_chip=data.get("chip"), source=str(audit_json))
            est_chip, est_source = str(data.get("chip") or "unknown"), "the audit JSON's chip"
            if chip_name and chip_name != est_chip:
                notes.append(f"estimates are the audit's, for {est_chip}; roofline attainment is on {chip_name}")
            loader = _loader_from_origin(data, dtype or (data.get("model") or {}).get("dtype"), attn)

            # the audited step as it was timed: its sizes and its mode (the report's header names a non-eager one)
            sc_obj = next((parse_scenarios([f"{s['kind']}:batch={s['batch']},seq={s['seq']}"
                                            + (f",past={s['past']}" if s.get("past") is not None else "")
                                            + (f",mode={m}" if (m := (s.get("step") or {}).get("mode", "eager")) != "eager" else "")])[0]
                           for s in data["scenarios"] if s["name"] == sc_name), None)
            if e2e:
                _, all_cases, _ = cases_from_json(data, sc_name, top=0, shapes=10**6)
                total_calls = sum(o["scenarios"][sc_name]["calls"] for o in data["ops"] if o.get("kind") == "compute" and sc_name in o["scenarios"])
                total_est = next(s["estimated_time_s"] for s in data["scenarios"] if s["name"] == sc_name)
        except (KeyError, TypeError, ValueError, AttributeError, StopIteration) as exc:
            raise NpuportError(f"{audit_json} is not an audit JSON bench can read ({type(exc).__name__}: {exc})",
                               "a file written by npuport audit --format json", str(data.get("schema")) if isinstance(data, dict)
                               else type(data).__name__) from None
    else:
        # the same chip `npuport audit` costs on without --chip: `bench MODEL` and `bench --from` of that audit then
        # rank the same ops with the same estimates
        est_chip = chip_name or default_chip()
        est_source = "--chip" if chip else "the device's chip" if chip_name else "default target chip"
        if not chip_name:
            notes.append(f"estimates are for {est_chip}, the default target chip (as npuport audit without --chip): "
                         f"{where} has no chip profile; pass --chip to estimate for another chip")
        say("auditing the model on fake tensors")
        report = audit_for_bench(model, hf_config, entry, scenario or "prefill", est_chip, dtype, attn, say)
        sc_obj = report.scenarios[0]
        sc_name = sc_obj.name
        cases, skipped = cases_from_report(report, sc_name, top, shapes)
        m = report.model
        model_info = {"name": m.name, "origin": m.origin, "parameters": m.parameters, "dtype": m.dtype,
                      "audit_chip": report.inventory.chip.name, "source": "audited now"}
        loader = lambda: load_target(model, hf_config, entry, dtype, attn, fake=False)  # noqa: E731
        notes.extend(report.notes)
        if e2e:
            all_cases, _ = cases_from_report(report, sc_name, every_op=True)
            total_calls = sum(1 for c in report.inventory.calls[sc_name] if c.kind == "compute")
            total_est = report.inventory.totals[sc_name].time_s
    if not cases:
        raise NpuportError("nothing to benchmark", "a scenario with hot ops (or --ops N)", f"{len(skipped)} case(s) could not be rebuilt")

    memory_cap = int(free_memory(where) * opts.memory_fraction)
    if dev.kind_of(where) == "cpu":
        memory_cap = min(memory_cap, 4 << 30)
    rep = BenchReport(model_info, sc_name, where, dev.device_name(where), chip_name, clock.kind, opts, [], skipped, notes=notes,
                      scenario_sizes=sc_obj.to_json() if sc_obj is not None else None, estimate_chip=est_chip,
                      estimate_chip_source=est_source)
    rep.clock_state["before"] = clocks.clock_state(where)
    # the compiler's logs and warnings stay off the terminal for the run, unless opts.debug
    with dev.pinned(pin_cpu), clocks.ClockSampler(where) as sampler, compiler_output(opts.debug):
        # the step first: torch.compile's worker processes (started by the compile candidate) would share the
        # host with the step's launches afterwards
        step = _time_whole_step(loader if sc_obj is not None else None, sc_obj, where, clock, sync, say) if e2e else None
        for i, case in enumerate(cases, 1):
            say(f"[{i}/{len(cases)}] {case.label} x{case.calls}")
            rep.results.append(_safe_case(case, where, clock, opts, profile, memory_cap, sync))
        if e2e:
            rep.e2e = _end_to_end(rep, all_cases or [], step, where, clock, opts, profile, memory_cap, sync, e2e_ops,
                                  total_calls, total_est, say)
    rep.clock_state["after"] = clocks.clock_state(where)
    rep.clock_state["under_load"] = sampler.summary()
    _collect_warnings(rep)
    if emit:
        context = f"Model {model_info.get('name')} ({model_info.get('origin')}), scenario {sc_name}."
        rows = [(r.case, f"median {r.median_s * 1e3:.4f} ms on {rep.device_name}" if r.median_s else "") for r in rep.results if r.error is None]
        rep.emitted = [str(p) for p in emit_scripts(rows, emit, context)]
    return rep


@dataclass
class BenchAudit:
    """The part of an audit bench needs: traces and the inventory (no coverage, rules or fusion advice)."""

    model: Any
    scenarios: list[Any]
    traces: dict[str, Any]
    inventory: Any
    notes: list[str]


def audit_for_bench(model: str | None, hf_config: str | None, entry: str | None, scenario: str, chip: str,
                    dtype: str | None, attn: str, say: Progress) -> BenchAudit:
    """Trace one scenario on fake tensors and cost it on `chip`: the audit's own first two stages, without the
    later ones (a benchmark needs only the recorded calls)."""
    parsed = parse_scenarios([scenario])
    if len(parsed) != 1:
        raise NpuportError("bench takes one scenario", "--scenario prefill (or train / decode, with :batch=N,seq=N,past=N)", scenario)
    target = load_target(model, hf_config, entry, dtype, attn)
    traced = trace_stage(target, parsed, say)
    cost = cost_stage(traced.traces, get_chip(chip), None)
    return BenchAudit(target, traced.scenarios, traced.traces, cost.inventory, traced.notes + cost.notes)


def _safe_case(case: BenchCase, where: str, clock: Clock, opts: BenchOptions, profile: Any, memory_cap: int,
               sync: Callable[[], None] | None, eager_only: bool = False) -> CaseResult:
    """One case; a failure of this case (out of memory, a backend error) is reported and the run goes on."""
    try:
        return bench_case(case, where, clock, opts, profile, memory_cap, sync, eager_only)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
        text = str(exc).strip().splitlines()[0][:240] if str(exc).strip() else ""
        res = CaseResult(case, error=f"{type(exc).__name__}: {text}")
        if dev.kind_of(where) == "cuda":
            torch.cuda.empty_cache()
        return res


def _time_whole_step(loader: Callable[[], Any] | None, sc: Any, where: str, clock: Clock,
                     sync: Callable[[], None] | None, say: Progress) -> tuple[Any, Any, Any] | str:
    """(step measurement, kernel time, kernel count), or why the step was not timed."""
    if loader is None:
        return ("the model file the audit names (its model.origin) is not at that path from here: run bench from the "
                "folder the audit ran in, or bench MODEL / --hf CONFIG.json instead of --from")
    say("end-to-end: building the model with random weights on the device and timing the whole step")
    try:
        return time_step(loader, sc, where, clock, sync=sync)
    except NpuportError as exc:
        return exc.render()
    except (RuntimeError, ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:240] if str(exc).strip() else ''}"
    finally:
        if dev.kind_of(where) == "cuda":
            torch.cuda.empty_cache()


def _end_to_end(rep: BenchReport, all_cases: list[BenchCase], step: tuple[Any, Any, Any] | str | None, where: str,
                clock: Clock, opts: BenchOptions, profile: Any, memory_cap: int, sync: Callable[[], None] | None,
                e2e_ops: str, total_calls: int, total_est: float, say: Progress) -> EndToEnd:
    """The op sum over every compute call of the step (other ops timed eager-only), next to the step time."""
    done = {(r.case.op, r.case.signature, tuple(s.dtype for s in r.case.inputs)): r for r in rep.results if r.median_s}
    quick = replace(opts, reps=min(opts.reps, 20), budget_s=min(opts.budget_s, 0.1), warmup=min(opts.warmup, 3))
    ops_sum, est_rest, measured_calls = 0.0, 0.0, 0
    todo = [c for c in all_cases if (c.op, c.signature, tuple(s.dtype for s in c.inputs)) not in done]
    covered = sum(r.case.estimated_s * r.case.calls for r in done.values())
    for r in done.values():
        ops_sum += (r.median_s or 0.0) * r.case.calls  # every result in `done` has a median
        measured_calls += r.case.calls
    if e2e_ops == "all" and todo:
        say(f"end-to-end: timing the {len(todo)} other op shapes of the step (eager only)")
    for c in todo:
        got = _safe_case(c, where, clock, quick, profile, memory_cap, sync, eager_only=True) if e2e_ops == "all" else None
        if got is not None and got.median_s:
            ops_sum += got.median_s * c.calls
            measured_calls += c.calls
        else:
            est_rest += c.estimated_s * c.calls
        covered += c.estimated_s * c.calls
    e = EndToEnd(None, ops_sum, est_rest, measured_calls, total_calls)
    if total_est and covered < 0.999 * total_est:
        e.notes.append(f"the rebuilt calls cover {covered / total_est:.0%} of the audit's estimated step time; the rest is left out of the sum")
    if est_rest:
        e.notes.append(f"{est_rest * 1e3:.3f} ms of the op sum is the audit's roofline estimate for calls that were not timed")
    if isinstance(step, str) or step is None:
        e.error = step or "not run"
    else:
        e.step, e.kernel_time_s, e.kernels = step
    return e


def _collect_warnings(rep: BenchReport) -> None:
    for r in rep.results:
        if r.kernel_check is not None and r.kernel_check.verdict in ("warn", "fail", "unknown"):
            rep.warnings.append(r.kernel_check.message)
        m = r.eager
        if m is not None and m.stats.spread > NOISY_SPREAD and m.stats.n >= 5:
            rep.warnings.append(f"{r.case.label}: noisy timing (p10..p90 spread {m.stats.spread:.0%} of the median)")
        if r.error:
            rep.warnings.append(f"{r.case.label}: not timed: {r.error}")
        for c in r.candidates:
            if c.recompiles:  # a guard failed between calls on identical inputs: the harness's bug, made visible
                rep.warnings.append(f"{r.case.label}: {c.name}: {c.skipped or f'{c.recompiles} recompile(s)'}")
    for key in ("before", "after"):
        state = rep.clock_state.get(key) or {}
        util = state.get("utilization.gpu")
        for w in clocks.clock_warnings(state) if isinstance(util, float) and util >= 50 else []:
            rep.warnings.append(f"clock {key} the run: {w}")
    for w in (rep.clock_state.get("under_load") or {}).get("warnings", []):
        rep.warnings.append(f"clock under load looks throttled: {w}")
    if rep.e2e is not None and (rep.e2e.flagged or rep.e2e.ops_exceed_step):
        rep.warnings.append(rep.e2e.verdict())


def environment() -> dict[str, str]:
    env = {"torch": torch.__version__, "python": platform.python_version()}
    if torch.version.cuda:
        env["cuda"] = str(torch.version.cuda)
    try:
        import triton  # noqa: PLC0415 - optional dependency, imported where it is used

        env["triton"] = triton.__version__
    except ImportError:
        pass
    return env
