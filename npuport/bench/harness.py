"""Time each case on the device: every candidate with the same clock and the same rotating input sets, the
kernel-path check, and the numbers in roofline units (achieved FLOP/s and bytes/s, attainment, measured vs
estimated)."""

from __future__ import annotations

import functools
import gc
from dataclasses import dataclass, field
from typing import Any, Callable

from npuport.bench import candidates as cand
from npuport.bench.cases import BenchCase
from npuport.bench.compiler import compiled
from npuport.bench.kernels import KernelCheck, check, record_names
from npuport.bench.rebuild import RebuildError, build, rotation_sets, set_bytes
from npuport.cost.roofline import ChipProfile
from npuport.devices.runtime import kind_of
from npuport.devices.timer import Clock, Measurement, measure
from npuport.mappings import load_checked


@dataclass
class BenchOptions:
    warmup: int = 10
    reps: int = 50
    min_reps: int = 5
    budget_s: float = 0.5  # per candidate: fewer repetitions for slow ops (never under min_reps)
    rotate_bytes: int = 256 << 20  # input sets rotated until they span this much (several times the L2)
    memory_fraction: float = 0.25  # of free memory, at most, for one case's input sets
    compile: bool | None = None  # None: on for cuda / npu, off on cpu (inductor's C++ build per op is slow)
    compile_backend: str = "inductor"  # tests compile on cpu with "aot_eager" (dynamo + AOTAutograd, no codegen)
    graph: bool = False
    graph_below_s: float = 20e-6  # capture a graph only for ops faster than this in eager
    graph_calls: int = 20
    alternatives: bool = True
    kernel_check: bool = True
    seed: int = 0
    debug: bool = False  # the compiler's logs and warnings on stderr (npuport.trace.compiler_logs.compiler_output)


@dataclass
class CandidateResult:
    name: str
    measurement: Measurement | None = None
    skipped: str | None = None
    note: str = ""
    ratio_to_eager: float | None = None  # eager median / this median: > 1 is faster than eager
    recompiles: int | None = None  # torch.compile: compiles of the case after its first (0, or the one refused)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "timing": self.measurement.to_json() if self.measurement else None,
                "skipped": self.skipped, "note": self.note, "speedup_vs_eager": self.ratio_to_eager,
                "recompiles": self.recompiles}


@dataclass
class CaseResult:
    case: BenchCase
    sets: int = 0
    candidates: list[CandidateResult] = field(default_factory=list)
    kernel_check: KernelCheck | None = None
    roofline_s: float | None = None  # on the bench chip, datasheet peaks
    bound: str | None = None
    measured_roofline_s: float | None = None  # on the bench chip's measured ceilings (hardware.yaml `measured`)
    error: str | None = None

    @property
    def eager(self) -> Measurement | None:
        return next((c.measurement for c in self.candidates if c.name == "eager"), None)

    @property
    def median_s(self) -> float | None:
        m = self.eager
        return m.stats.median if m else None

    def achieved(self) -> tuple[float | None, float | None]:
        t = self.median_s
        if not t:
            return None, None
        return (self.case.flops / t if self.case.flops else None), (self.case.bytes / t if self.case.bytes else None)

    def attainment(self, measured: bool = False) -> float | None:
        ref = self.measured_roofline_s if measured else self.roofline_s
        t = self.median_s
        return ref / t if ref and t else None

    def vs_estimate(self) -> float | None:
        t = self.median_s
        return t / self.case.estimated_s if t and self.case.estimated_s else None


def measured_ceilings(chip: ChipProfile | None) -> dict[str, float]:
    """The chip's measured bf16 matmul rate and copy bandwidth, when hardware.yaml has them."""
    if chip is None:
        return {}

    raw = (load_checked("hardware.yaml").get("chips", {}).get(chip.name) or {}).get("measured") or {}
    return {k: float(v) for k, v in raw.items() if isinstance(v, (int, float))}


def measured_roofline(chip: ChipProfile, ceilings: dict[str, float], case: BenchCase) -> float | None:
    if not ceilings:
        return None
    peak = ceilings.get("bfloat16_matmul_8192") if case.matrix and case.dtype in ("bfloat16", "float16") else None
    peak = peak or chip.peak_flops(case.dtype, case.matrix)
    bw = ceilings.get("d2d_copy_bytes_per_s", chip.memory_bandwidth)
    return max(case.flops / peak if case.flops else 0.0, case.bytes / bw if case.bytes else 0.0) or None


def _time(prep: cand.Prepared, clock: Clock, opts: BenchOptions, warmup: int | None = None) -> Measurement:
    return measure(prep.fn, prep.inputs, clock, warmup=opts.warmup if warmup is None else warmup, reps=opts.reps,
                   min_reps=opts.min_reps, budget_s=opts.budget_s, calls_per_sample=prep.calls_per_sample)


def bench_case(case: BenchCase, device: str, clock: Clock, opts: BenchOptions, chip: ChipProfile | None,
               memory_cap: int, sync: Callable[[], None] | None = None, eager_only: bool = False) -> CaseResult:
    res = CaseResult(case)
    if chip is not None:
        res.roofline_s, res.bound = chip.roofline(case.flops, case.bytes, case.dtype, case.matrix)
        res.measured_roofline_s = measured_roofline(chip, measured_ceilings(chip), case)
    res.sets = rotation_sets(case, opts.rotate_bytes, memory_cap)
    if set_bytes(case) > memory_cap:
        res.error = f"one input set needs {set_bytes(case) / 2**30:.1f} GiB, over the {memory_cap / 2**30:.1f} GiB allowed"
        return res
    try:
        runnable = build(case, device, res.sets, opts.seed)
        eager = cand.eager(runnable, device)
        cand.try_once(eager.fn, eager.inputs[0], case.op)
    except (RebuildError, cand.Unsupported) as exc:
        res.error = str(exc)
        return res
    res.candidates.append(CandidateResult("eager", _time(eager, clock, opts)))
    if not eager_only:
        _side_by_side(res, runnable, device, clock, opts, sync)
        if opts.kernel_check:
            kernels, aten = record_names(kind_of(device), lambda: eager.fn(eager.inputs[0]), sync=sync)
            res.kernel_check = check(case.op, case.dtype, kind_of(device), kernels, aten, label=case.label)
    base = res.median_s
    for c in res.candidates:
        if c.measurement and base:
            c.ratio_to_eager = base / c.measurement.stats.median if c.measurement.stats.median > 0 else None
    del runnable, eager
    gc.collect()
    return res


def _side_by_side(res: CaseResult, runnable: Any, device: str, clock: Clock, opts: BenchOptions,
                  sync: Callable[[], None] | None) -> None:
    makers: list[tuple[str, Callable[[], cand.Prepared]]] = []
    if opts.compile:
        makers.append(("compile", lambda: compiled(runnable, device, sync, opts.compile_backend)))
    if opts.graph and res.median_s is not None and res.median_s < opts.graph_below_s:
        makers.append(("graph", lambda: cand.graphed(runnable, device, opts.graph_calls)))
    if opts.alternatives:
        for name, factory in cand.alternatives_for(res.case.op).items():
            makers.append((name, functools.partial(factory, runnable, device)))
    for name, make in makers:
        try:
            prep = make()
            with prep.timing():
                measured = _time(prep, clock, opts)
            res.candidates.append(CandidateResult(prep.name, measured, note=prep.note,
                                                  recompiles=prep.recompiles() if prep.recompiles else None))
        except cand.Unsupported as exc:
            res.candidates.append(CandidateResult(name, skipped=str(exc), recompiles=getattr(exc, "recompiles", None)))
