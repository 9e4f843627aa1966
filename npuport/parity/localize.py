"""First divergence and replay: which module introduces the error, and which aten op inside it.

1. First divergence: walking module calls in completion order (innermost first), the first call whose output fails
   its tolerance while every input passed theirs.
2. Replay: that module alone, on the dev device, fed the ref's recorded inputs (or the dev's own, when the record
   kept no full inputs), against the ref's output and against the same module in float64 on the CPU. If the
   replay still fails, the module introduces the error; if it passes, it inherits it.
3. Ops: every aten op of the replay is re-run in float64 on the CPU with its own recorded inputs; the first whose
   output exceeds the dtype's op_rel_l2 is named.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from npuport.parity.compare import Comparison, EntryResult
from npuport.parity.entries import Capture, call_key
from npuport.parity.metrics import Metrics, stats_metrics, tensor_metrics
from npuport.parity.modes import Float64Mode, OpTap
from npuport.parity.session import LiveSide, Prepared, modes_for
from npuport.parity.stats import tensor_stats
from npuport.parity.tolerances import Tolerances
from npuport.parity.tree import from_spec, leaf_paths, map_tensors, to_spec
from npuport.trace.modules import ModuleStack
from npuport.trace.naming import op_name

_NOT_RERUN = ("empty", "rand", "normal", "bernoulli", "dropout", "uniform", "exponential", "multinomial")
_LOW = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class OpCheck:
    index: int
    op: str
    module: str
    rel_l2: float | None
    max_abs: float | None
    limit: float
    passed: bool
    note: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "op": self.op, "module": self.module, "rel_l2": self.rel_l2,
                "max_abs": self.max_abs, "limit": self.limit, "passed": self.passed, "note": self.note}


@dataclass
class Replay:
    inputs_from: str  # "ref" (the recorded reference inputs) or "dev" (the dev side's own inputs)
    verdict: str  # introduces | inherits
    reason: str
    dev_vs_ref: dict[str, Any] | None
    dev_vs_golden: float | None
    ref_vs_golden: float | None
    ops: list[OpCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def culprit(self) -> OpCheck | None:
        return next((o for o in self.ops if not o.passed), None)

    def to_json(self) -> dict[str, Any]:
        c = self.culprit
        return {"inputs_from": self.inputs_from, "verdict": self.verdict, "reason": self.reason,
                "dev_vs_ref": self.dev_vs_ref, "dev_vs_golden": self.dev_vs_golden, "ref_vs_golden": self.ref_vs_golden,
                "culprit_op": c.to_json() if c is not None else None, "ops": [o.to_json() for o in self.ops], "notes": self.notes}


@dataclass
class FirstDivergence:
    module: str
    call: int
    result: EntryResult
    inputs_within: bool
    first_op: str | None = None
    replay: Replay | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def call_key(self) -> str:
        return call_key(self.module, self.call)

    def __str__(self) -> str:
        text = f"first divergence: {self.call_key} ({self.result.entry.key}: {self.result.reason})"
        if not self.inputs_within:
            text += "; its inputs already differed"
        if self.replay:
            text += f"; replayed on dev with {self.replay.inputs_from} inputs: {self.replay.verdict} the error"
            if self.replay.culprit is not None:
                text += f", first failing op {self.replay.culprit.op} in {self.replay.culprit.module or '<model>'}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"call_key": self.call_key, "module": self.module, "call": self.call, "entry": self.result.entry.key,
                "reason": self.result.reason, "metrics": self.result.metrics.to_json(), "inputs_within": self.inputs_within,
                "first_op": self.first_op, "replay": self.replay.to_json() if self.replay else None, "notes": self.notes}


def first_divergence(comp: Comparison) -> FirstDivergence | None:
    by_call: dict[str, dict[str, list[EntryResult]]] = {}
    order: list[str] = []
    for r in comp.results:
        e = r.entry
        if e.io not in ("in", "out", "op"):
            continue
        ck = call_key(e.module, e.call)
        if ck not in by_call:
            by_call[ck] = {"in": [], "out": [], "op": []}
        by_call[ck][e.io].append(r)
        if e.io == "out" and ck not in order:
            order.append(ck)
    order.sort(key=lambda ck: min(r.entry.order for r in by_call[ck]["out"]))
    fallback = None
    for ck in order:
        group = by_call[ck]
        bad = [r for r in group["out"] if not r.passed]
        if not bad:
            continue
        ops = sorted((r for r in group["op"] if not r.passed), key=lambda r: r.entry.order)
        fd = FirstDivergence(bad[0].entry.module, bad[0].entry.call, bad[0], all(group["in"]),
                             ops[0].entry.op if ops else None)
        if fd.inputs_within:
            return fd
        fallback = fallback or fd
    return fallback


def _inputs(cap: Capture, ck: str) -> Any | None:
    call = cap.calls.get(ck)
    if call is None or not all(b in cap.full for b in call["blobs"]):
        return None
    tensors = [cap.full[b] for b in call["blobs"]]
    return from_spec(call["spec"], tensors)


def replay(fd: FirstDivergence, ref: Capture, dev: LiveSide, prep: Prepared, tols: Tolerances,
           dev_full: Capture | None = None) -> Replay:
    """Run the divergent module alone on the dev device (and in float64) with recorded inputs."""
    inputs, source = _inputs(ref, fd.call_key), "ref"
    if inputs is None:
        inputs, source = _inputs(dev_full or dev.capture, fd.call_key), "dev"
    if inputs is None:
        return Replay("none", "unknown", "no full inputs were recorded for this call", None, None, None)
    tol = tols.for_dtype(fd.result.entry.dtype)
    dev_out, ops = _run_on_dev(dev, fd.module, inputs)
    gold_out = _run_golden(prep, fd.module, inputs)
    ref_outs = {e.leaf: e for e in ref.entries if e.io == "out" and call_key(e.module, e.call) == fd.call_key}
    dspec, dtensors = to_spec(dev_out)
    gspec, gtensors = to_spec(gold_out)
    gleaves = {leaf: gtensors[i] for leaf, i in leaf_paths(gspec)}
    leaf = fd.result.entry.leaf
    d = next((dtensors[i] for lf, i in leaf_paths(dspec) if lf == leaf), None)
    notes = [f"inputs: the {source} side's recorded inputs of {fd.call_key}"]
    if d is None or leaf not in ref_outs:
        return Replay(source, "unknown", f"the replay returned no output {leaf!r}", None, None, None, _op_checks(ops, tols), notes)
    re = ref_outs[leaf]
    g = gleaves.get(leaf)
    dev_vs_golden = tensor_metrics(d, g, tol.rtol, tol.atol).rel_l2 if g is not None else None
    if source == "ref":
        m = _against(d, ref, re.blob, tol)
        ref_vs_golden = tensor_metrics(ref.full[re.blob], g, tol.rtol, tol.atol).rel_l2 if (g is not None and re.blob in ref.full) else None
        if dev_vs_golden is not None and ref_vs_golden is not None:
            limit = tol.k * max(ref_vs_golden, tol.floor)
            bad = dev_vs_golden > limit
            reason = (f"with identical inputs, dev vs float64 rel_l2 {dev_vs_golden:.3g} {'>' if bad else '<='} "
                      f"{tol.k:g} x max(ref's {ref_vs_golden:.3g}, floor {tol.floor:.3g})")
        else:
            bad = m.rel_l2 > tol.rel_l2 or m.cosine < tol.cosine
            reason = f"with identical inputs, dev vs ref rel_l2 {m.rel_l2:.3g} ({'>' if bad else '<='} {tol.rel_l2:.3g})"
        result = Replay(source, "introduces" if bad else "inherits", reason, m.to_json(), dev_vs_golden, ref_vs_golden, notes=notes)
    else:
        bad = dev_vs_golden is not None and dev_vs_golden > tol.rel_l2
        reason = f"dev vs float64 on the dev's own inputs: rel_l2 {dev_vs_golden:.3g} ({'>' if bad else '<='} {tol.rel_l2:.3g})"
        result = Replay(source, "introduces" if bad else "inherits", reason, None, dev_vs_golden, None, notes=notes)
    result.ops = _op_checks(ops, tols)
    return result


def _against(d: torch.Tensor, ref: Capture, blob: int, tol: Any) -> Metrics:
    if blob in ref.full:
        return tensor_metrics(d.cpu(), ref.full[blob], tol.rtol, tol.atol)
    return stats_metrics(tensor_stats(d), ref.stats_of(blob), tol.rtol, tol.atol)


def _run_on_dev(dev: LiveSide, path: str, inputs: Any) -> tuple[Any, list[tuple[Any, str, Any, Any, Any]]]:
    sub = dict(dev.module.named_modules())[path]
    stack = ModuleStack(dev.module)
    ops: list[tuple[Any, str, Any, Any, Any]] = []

    def on_op(func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        cpu = lambda t: t.detach().to("cpu", copy=True)  # noqa: E731
        ops.append((func, stack.current() or "", map_tensors(args, cpu), map_tensors(kwargs, cpu), map_tensors(out, cpu)))

    moved = map_tensors(inputs, lambda t: t.to(dev.device.torch_device))

    with torch.no_grad(), stack.attached(), contextlib.ExitStack() as es:
        for mode in modes_for(dev.device)(stack):
            es.enter_context(mode)
        es.enter_context(OpTap(on_op))
        out = sub(*moved["args"], **moved["kwargs"])
    dev.device.synchronize()
    return map_tensors(out, lambda t: t.detach().cpu()), ops


def _run_golden(prep: Prepared, path: str, inputs: Any) -> Any:
    sub = copy.deepcopy(dict(prep.lm.module.named_modules())[path]).to(torch.float64)
    up = map_tensors(inputs, lambda t: t.to(torch.float64) if t.is_floating_point() else t)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad(), Float64Mode():
            return sub(*up["args"], **up["kwargs"])
    finally:
        torch.set_default_dtype(old)


def _op_checks(ops: list[tuple[Any, str, Any, Any, Any]], tols: Tolerances) -> list[OpCheck]:
    checks: list[OpCheck] = []
    for i, (func, module, args, kwargs, out) in enumerate(ops):
        name = op_name(func)
        _, outs = to_spec(out)
        floats = [t for t in outs if t.is_floating_point()]
        if not floats:
            continue
        tol = tols.for_dtype(str(floats[0].dtype).removeprefix("torch."))
        if any(w in name for w in _NOT_RERUN):
            checks.append(OpCheck(i, name, module, None, None, tol.op_rel_l2, True, "not re-run (random or uninitialised output)"))
            continue
        try:
            ref_out = func(*_up(args), **_up_kwargs(kwargs))
        except Exception as exc:  # an op with no CPU float64 kernel: say so, keep going
            checks.append(OpCheck(i, name, module, None, None, tol.op_rel_l2, True, f"no float64 CPU re-run: {type(exc).__name__}"))
            continue
        _, refs = to_spec(ref_out)
        worst: Metrics | None = None
        for a, b in zip(outs, refs):
            if a.is_floating_point() and a.shape == b.shape:
                m = tensor_metrics(a, b, tol.rtol, tol.atol)
                worst = m if worst is None or m.rel_l2 > worst.rel_l2 else worst
        if worst is None:
            continue
        checks.append(OpCheck(i, name, module, worst.rel_l2, worst.max_abs, tol.op_rel_l2, worst.rel_l2 <= tol.op_rel_l2))
    return checks


def _up(x: Any) -> Any:
    return map_tensors(x, lambda t: t.to(torch.float64) if t.dtype in _LOW else t)


def _up_kwargs(kwargs: dict) -> dict:
    out = {}
    for k, v in kwargs.items():
        if isinstance(v, torch.dtype) and v in _LOW:
            v = torch.float64
        elif isinstance(v, torch.device):
            v = torch.device("cpu")
        out[k] = _up(v)
    return out
