"""audit: load -> trace each scenario on fake tensors -> inventory (costs, roofline, classes) -> report object.

Coverage, behaviour rules, the source scan and fusion advice attach to the same report as they become available.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import torch

from npuport.costs import op_classes
from npuport.errors import NpuportError
from npuport.inventory import Inventory, build_inventory
from npuport.loading import LoadedModel, describe_exception
from npuport.roofline import get_chip, load_chips
from npuport.scenarios import Scenario, fit_to_context
from npuport.trace.recorder import Recorder
from npuport.trace.records import Trace

Progress = Callable[[str], None]


@dataclass
class AuditReport:
    model: LoadedModel
    scenarios: list[Scenario]
    inventory: Inventory
    traces: dict[str, Trace]
    torch_npu: str | None
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)  # coverage / findings / source scan / fusions / routes
    failed: list[tuple[str, str]] = field(default_factory=list)  # (scenario, one-line reason) that could not be traced


def _loss_of(model: LoadedModel, out: Any, inputs: tuple[tuple, dict]) -> torch.Tensor:
    if model.loss is not None:
        return model.loss(out, inputs)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None and isinstance(out, torch.Tensor) and out.numel() == 1:
        loss = out
    if not isinstance(loss, torch.Tensor):
        raise NpuportError(
            "the training scenario needs a loss",
            "an output with .loss, a scalar output, or loss_fn(output, inputs) in model.py",
            type(out).__name__,
        )
    return loss


from npuport.hf.build import quiet_transformers as _quiet_libraries  # noqa: E402


def trace_scenario(model: LoadedModel, sc: Scenario) -> tuple[Trace | None, Scenario]:
    """Run one scenario under the recorder; None when the scenario does not apply to the model. Returns the scenario
    as it really ran (a decode of a model with no cache re-runs its context)."""
    try:
        with _torch_logs_quiet():
            inputs = model.make_inputs(sc)
    except NpuportError:
        raise
    except Exception as exc:
        what = "building the cache for" if sc.kind == "decode" else "making the inputs of"
        raise NpuportError(f"{what} the {sc.name} scenario failed", "a model that runs on its inputs",
                           describe_exception(exc)) from None
    if inputs is None:
        return None, sc
    sc = _as_run(model, sc, inputs)
    try:
        return _record(model, sc, inputs, real=True), sc
    except _DataDependent:
        # a guard transformers skips while tracing read a tensor value on the real path: follow the tracing path
        # for this scenario and say so (the inventory may then hold an explicit mask the real run does not build)
        trace = _record(model, sc, model.make_inputs(sc) or inputs, real=False)
        trace.notes.append(f"{sc.name}: traced along transformers' export path (a value-dependent check on the real "
                           "path cannot run on fake tensors)")
        return trace, sc


class _DataDependent(Exception):
    pass


def _record(model: LoadedModel, sc: Scenario, inputs: tuple[tuple, dict], real: bool) -> Trace:
    from torch._subclasses.fake_tensor import DataDependentOutputException

    from npuport.hf.inputs import real_path

    args, kwargs = inputs
    module = model.module
    was_training = module.training
    module.train(sc.kind == "train")
    path = real_path() if real else contextlib.nullcontext()
    try:
        with model.mode, Recorder(module, sc.name) as rec, warnings.catch_warnings(), _quiet_libraries(), \
                _torch_logs_quiet(), path:
            warnings.simplefilter("ignore")  # library deprecation chatter is not the user's audit
            grad = contextlib.nullcontext() if sc.kind == "train" else torch.no_grad()
            with grad:
                out = module(*args, **kwargs)
                if sc.kind == "train":
                    rec.backward(_loss_of(model, out, inputs))
    except NpuportError:
        raise
    except DataDependentOutputException as exc:
        if real and model.config is not None:
            raise _DataDependent() from exc
        raise NpuportError(f"the model failed on the {sc.name} inputs", "code that does not read tensor values "
                           "(fake tensors have none)", describe_exception(exc)) from None
    except Exception as exc:
        raise NpuportError(
            f"the model failed on the {sc.name} inputs",
            "example inputs that fit the model",
            describe_exception(exc),
        ) from None
    finally:
        module.train(was_training)
    return rec.trace


def _as_run(model: LoadedModel, sc: Scenario, inputs: tuple[tuple, dict]) -> Scenario:
    """A decode whose inputs hold no cache of `past` positions but the whole context re-runs it per token."""
    if sc.kind != "decode" or not sc.past:
        return sc
    recomputes = getattr(model.make_inputs, "recomputes", None)
    if recomputes is not None:
        return replace(sc, recompute=bool(recomputes(sc)))
    from torch.utils._pytree import tree_flatten

    tensors = [t for t in tree_flatten(list(inputs))[0] if isinstance(t, torch.Tensor)]
    if any(sc.past in t.shape for t in tensors):
        return sc
    if any(sc.past + sc.seq in t.shape for t in tensors):
        return replace(sc, recompute=True)
    return sc


from npuport.trace.run import quiet_torch_logs as _torch_logs_quiet  # noqa: E402


def _skip_reason(model: LoadedModel, sc: Scenario) -> str:
    if getattr(model.make_inputs, "encoder", False) and sc.kind == "decode":
        return f"{sc.name}: skipped: the model is a bidirectional encoder (every token attends to every other), so it has no token-by-token decode"
    return f"{sc.name}: skipped (example_inputs returned None)"


def native_composites_for(chip_family: str, torch_npu: str | None) -> tuple[frozenset[str], str | None]:
    """Composites the target runs as one op. NPU: from the torch_npu coverage data; CUDA: SDPA."""
    cuda = op_classes().cuda_native_composites
    if chip_family != "npu":
        return cuda, None
    try:
        from npuport import coverage
    except ImportError:
        return cuda, "no torch_npu coverage data installed: only scaled_dot_product_attention is treated as an NPU-native composite"
    try:
        return frozenset(coverage.native_composites(torch_npu)), None
    except AttributeError:
        return cuda, "coverage data lacks the NPU-native composite list"


def run_audit(
    model: LoadedModel,
    scenarios: list[Scenario],
    chip: str = "Ascend910B",
    torch_npu: str | None = None,
    progress: Progress | None = None,
    route_preset: str = "default",
    route_weights: str | None = None,
    reproducibility: bool = False,
) -> AuditReport:
    target = get_chip(chip)
    notes: list[str] = []
    traces: dict[str, Trace] = {}
    used: list[Scenario] = []
    timings: dict[str, float] = {}
    failed: list[tuple[str, str]] = []
    errors: list[NpuportError] = []
    notes.extend(model.notes)
    from npuport.hf.fallbacks import kernel_fallbacks, notes_for

    with kernel_fallbacks() as fallbacks:
        for sc in scenarios:
            sc, note = fit_to_context(sc, model.max_positions)
            if note:
                notes.append(note)
            if progress:
                progress(f"tracing {sc.describe()}")
            t0 = time.perf_counter()
            try:
                trace, sc = trace_scenario(model, sc)
            except NpuportError as exc:  # the other scenarios still report; this one is named with its reason
                failed.append((sc.name, exc.render()))
                errors.append(exc)
                if progress and len(scenarios) > 1:
                    progress(f"{sc.name} failed: {exc.render()}")
                continue
            finally:
                timings[f"trace_{sc.name}_s"] = time.perf_counter() - t0
            if trace is None:
                notes.append(_skip_reason(model, sc))
                continue
            if sc.recompute:
                notes.append(f"{sc.name}: the model keeps no KV cache, so each new token re-runs the whole "
                             f"{sc.past + sc.seq}-token context (traced as such)")
            notes.extend(trace.notes)
            traces[sc.name] = trace
            used.append(sc)
    notes.extend(notes_for(fallbacks))
    if not traces:
        if len(errors) == 1:
            raise errors[0]
        if failed:
            name, reason = failed[0]
            raise NpuportError(f"no scenario could be traced ({', '.join(n for n, _ in failed)} failed)",
                               "a model that runs on its inputs", f"{name}: {reason}")
        raise NpuportError("no scenario could be traced", "example_inputs(scenario) to return inputs for at least one scenario", ", ".join(s.name for s in scenarios))
    if progress:
        progress("costing ops on the roofline")
    t0 = time.perf_counter()
    composites, note = native_composites_for(target.family, torch_npu)
    if note:
        notes.append(note)
    inventory = build_inventory(traces, target, composites, load_chips())
    timings["inventory_s"] = time.perf_counter() - t0
    assumptions = list(target.assumptions)
    assumptions.append("roofline lower bound: time = max(FLOPs / peak, bytes / bandwidth) per op; no launch overhead, no overlap")
    if any(e.op.endswith("scaled_dot_product_attention") for e in inventory.ops):
        assumptions.append("causal attention FLOPs are counted at half (fused kernels skip masked blocks)")
    if any(e.op == "aten::_grouped_mm" for e in inventory.ops):
        assumptions.append("MoE experts traced through transformers' grouped_mm path: every routed token meets its top-k experts; "
                           "expert FLOPs are those of the active experts only, routing assumed uniform across experts")
    report = AuditReport(model, used, inventory, traces, torch_npu, notes, assumptions, timings, failed=failed)
    if target.family == "npu" or torch_npu:
        t0 = time.perf_counter()
        _attach_coverage_if_available(report, torch_npu)
        timings["coverage_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    attach_findings(report, reproducibility)
    timings["rules_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    attach_fusions(report, route_preset, route_weights)
    timings["fusion_s"] = time.perf_counter() - t0
    return report


def _attach_coverage_if_available(report: AuditReport, torch_npu: str | None) -> None:
    try:
        from npuport import coverage
    except ImportError:
        report.notes.append("torch_npu coverage data is not installed: no coverage column")
        return
    if not hasattr(coverage, "resolve"):
        report.notes.append("torch_npu coverage data is not installed: no coverage column")
        return
    from npuport.audit_coverage import attach_coverage

    attach_coverage(report, torch_npu)


def attach_findings(report: AuditReport, reproducibility: bool = False) -> None:
    """Behaviour rules over the recorded calls (NPU targets) and the CUDA-API source scan of the model's files."""
    chip = report.inventory.chip
    if chip.family == "npu":
        from npuport.rules import evaluate

        # each recorded call's share of its scenario, as the inventory costs it (a native composite's time is
        # spread over the CPU-traced calls it stands for)
        shares: dict[int, float] = {}
        for name, trace in report.traces.items():
            total = report.inventory.totals[name].time_s or 1.0
            for rc in report.inventory.calls[name]:
                for i in rc.indices:
                    shares[id(trace.calls[i])] = rc.time_s / total / len(rc.indices)
        findings = evaluate(report.traces, chip=chip.name, torch_npu=report.torch_npu,
                            time_share=lambda call: shares.get(id(call), 0.0), reproducibility=reproducibility)
        report.extras["finding_objects"] = findings + _recompute_findings(report)
    if report.model.source_files:
        from npuport.rules.source_scan import scan

        report.extras["scan_object"] = scan(report.model.source_files[0])


def _recompute_findings(report: AuditReport) -> list:
    """A decode with no cache re-runs the whole context for every new token: say so, with where the time goes."""
    from npuport.rules.engine import Evidence, Finding

    out = []
    for sc in report.scenarios:
        if not sc.recompute:
            continue
        total = report.inventory.totals[sc.name]
        out.append(Finding(
            id="NPD001", title="decode without a KV cache", level="warning", impact="performance",
            message=(f"decode re-runs the whole {sc.past + sc.seq}-token context for each new token "
                     f"({total.flops / max(1, sc.batch):.3g} FLOPs per token per sequence, growing with the context)"),
            fix="keep the attention keys / values of past tokens (a KV cache) and run only the new token per step",
            source="npuport: traced decode inputs hold the whole context and no cache",
            evidence=[Evidence(scenario=sc.name, op="(model forward)", module="", module_type=type(report.model.module).__name__,
                               source=None, calls=1, time_share=1.0)],
            detection="trace", chip=report.inventory.chip.name,
        ))
    return out


def attach_fusions(report: AuditReport, preset: str = "default", overrides: str | None = None) -> None:
    """Fusion opportunities (proposed / blocked) and the scored implementation routes per hot op and chain."""
    from npuport import routes as routes_mod
    from npuport.fusion.advice import advise, summarize

    w = routes_mod.weights(preset, overrides)
    rows = summarize(advise(report.traces, report.inventory.chip, report.torch_npu))
    report.extras["fusions"] = rows
    cov = report.extras.get("coverage_by_op", {})
    out = []
    for entry in report.inventory.ops:
        if entry.cls == "hot" and entry.kind == "compute":
            out.append(routes_mod.score_op(entry.op, (cov.get(entry.op) or {}).get("status"), w))
    seen: set[tuple[str, str]] = set()
    for row in rows:
        key = (row["pattern"], row["module"])
        if key in seen or row["status"] in ("fused",):
            continue
        seen.add(key)
        out.append(routes_mod.score_fusion(row, row["unfused_time_s"], row["fused_time_s"], w))
    report.extras["routes"] = out
    report.extras["route_weights"] = w
