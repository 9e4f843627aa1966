"""What gets benchmarked: one `BenchCase` per op x input shapes x dtypes of a scenario, with the recorded call.

From an audit report, a case carries the call exactly as it was recorded (arguments with `TensorRef` leaves,
strides of non-contiguous inputs); from the audit JSON alone it is rebuilt from the shape strings
(`npuport.bench.from_json`). Pure data: nothing here allocates a tensor.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from npuport.cost.inventory import shape_signature
from npuport.cost.op_costs import itemsize
from npuport.errors import NpuportError
from npuport.trace.records import TensorMeta

FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2"})


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...] | None = None  # None: contiguous

    @classmethod
    def of(cls, meta: TensorMeta) -> "TensorSpec":
        return cls(tuple(meta.shape), meta.dtype, tuple(meta.stride) if meta.stride is not None else None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.stride is not None:
            out["stride"] = list(self.stride)
        return out


@dataclass
class BenchCase:
    """One op at one input signature. Costs and the estimate are per call; `calls` is how often the step runs it."""

    op: str  # the op as reported: "aten::mm", "aten::scaled_dot_product_attention"
    signature: str  # input shapes as the audit prints them: "2048x2048 2048x5632"
    inputs: tuple[TensorSpec, ...]
    args: tuple[Any, ...]  # recorded positional args, tensors as TensorRef(index into inputs)
    kwargs: dict[str, Any]
    calls: int
    flops: float
    bytes: int
    matrix: bool
    dtype: str  # the dtype its cost is counted in (the roofline peak it is held against)
    estimated_s: float  # the audit's roofline estimate per call, on `estimate_chip`
    estimate_chip: str
    phase: str = "forward"
    module: str = ""
    origin: str = "trace"  # "trace" (exact recorded call) or "shapes" (rebuilt from the audit JSON's strings)
    notes: list[str] = field(default_factory=list)
    op_class: str = ""

    @property
    def label(self) -> str:
        return f"{self.op} [{self.signature}]"

    @property
    def input_bytes(self) -> int:
        total = 0
        for spec in self.inputs:
            n = 1
            for s in spec.shape:
                n *= s
            total += n * itemsize(spec.dtype)
        return total


@dataclass
class Skipped:
    op: str
    signature: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"op": self.op, "signature": self.signature, "reason": self.reason}


def select_ops(rows: Iterable[tuple[str, str, float]], top: int | None) -> list[str]:
    """rows: (op, class in the scenario, estimated time in the scenario) of compute ops. Default: the hot ops;
    `top`: the `top` costliest ops whatever their class."""
    ordered = sorted(rows, key=lambda r: -r[2])
    if top is None:
        return [op for op, cls, t in ordered if cls == "hot" and t > 0]
    return [op for op, _cls, t in ordered if t > 0][: top if top > 0 else None]


def cases_from_report(report: Any, scenario: str, top: int | None = None, shapes: int = 3,
                      every_op: bool = False) -> tuple[list[BenchCase], list[Skipped]]:
    """Cases from an `AuditReport`: the recorded call of the first call of each op x shapes x dtypes group.

    `every_op` returns every compute group of the scenario (for the end-to-end sum), ignoring top / shapes.
    """
    if scenario not in report.traces:
        raise NpuportError(f"scenario {scenario!r} was not traced", "one of the audited scenarios", ", ".join(report.traces) or "none")
    inv = report.inventory
    trace = report.traces[scenario]
    groups: dict[tuple[str, str, tuple[str, ...]], list[Any]] = defaultdict(list)

    for rc in inv.calls[scenario]:
        if rc.kind != "compute":
            continue
        groups[(rc.op, shape_signature(rc), tuple(t.dtype for t in rc.inputs))].append(rc)
    classes = {e.op: e.by_scenario[scenario] for e in inv.ops if scenario in e.by_scenario and e.kind == "compute"}
    if every_op:
        wanted = list(classes)
    else:
        wanted = select_ops(((op, s.cls, s.time_s) for op, s in classes.items()), top)
    by_op: dict[str, list[tuple[tuple[str, str, tuple[str, ...]], list[Any]]]] = defaultdict(list)
    for key, calls in groups.items():
        by_op[key[0]].append((key, calls))
    cases: list[BenchCase] = []
    skipped: list[Skipped] = []
    for op in wanted:
        ranked = sorted(by_op.get(op, []), key=lambda kv: -sum(c.time_s for c in kv[1]))
        for (op_name, sig, _dtypes), calls in (ranked if every_op else ranked[:shapes]):
            case = _case_from_call(calls, trace, inv.chip.name, classes[op].cls)
            if isinstance(case, str):
                skipped.append(Skipped(op_name, sig, case))
            else:
                cases.append(case)
    return cases, skipped


def _case_from_call(calls: list[Any], trace: Any, chip: str, op_class: str) -> BenchCase | str:
    rc = calls[0]
    recorded = trace.calls[rc.index]
    if rc.children:  # a native composite (SDPA): rebuild the torch-level call the backend dispatches as one op
        if rc.phase != "forward":
            return "backward of a native composite needs its autograd graph: time it in the train step end-to-end"
        frame = trace.frames.get(recorded.frame) if recorded.frame is not None else None
        if frame is None:
            return "the composite's torch-level frame was not recorded"
        args, kwargs, inputs = frame.args, frame.kwargs, frame.inputs
    else:
        args, kwargs, inputs = recorded.args, recorded.kwargs, recorded.inputs
    return BenchCase(
        op=rc.op, signature=shape_signature(rc), inputs=tuple(TensorSpec.of(t) for t in inputs), args=tuple(args),
        kwargs=dict(kwargs), calls=len(calls), flops=rc.cost.flops, bytes=rc.cost.bytes, matrix=rc.cost.matrix,
        dtype=rc.cost.dtype, estimated_s=rc.time_s, estimate_chip=chip, phase=rc.phase, module=rc.module,
        origin="trace", op_class=op_class,
    )
