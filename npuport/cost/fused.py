"""A step's calls as torch.compile's default mode (Inductor) would launch them, for the `mode=compile` step time.

Inductor hands GEMMs, attention, sorts, top-k and indexed stores to their own kernels (extern calls and fallbacks)
and fuses what runs between them (pointwise ops, casts, copies, reductions, concatenations, gathers, views) into
generated kernels. A run of such calls between two of the others is taken here as one kernel: it reads what the
run did not make itself and writes what is read after the run (or by nobody within the step: an output, a cache
entry, a gradient), and nothing of what only the run used. That is the traffic a fused kernel has; its time is that
traffic at the chip's elementwise rates (mappings/timing.yaml). A value read back to the host (a sync op) ends a
compiled graph (a graph break), so it ends the run too and starts a new graph.

What this leaves out, said in docs/profile.md: Inductor may split a run that mixes reductions over different
dimensions into several kernels, and in training its partitioner recomputes cheap forward values in the backward
instead of saving them; both move a fused step's time by the pointwise share of it, not its GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from npuport.cost.op_costs import base_name, itemsize
from npuport.cost.timing import Issued, TimingModel, sync_ops
from npuport.trace.records import TensorMeta

if TYPE_CHECKING:  # the inventory imports this module
    from npuport.cost.inventory import ReportedCall

# the timing classes (npuport.cost.timing op_class and its variants) whose calls Inductor generates kernels for and
# fuses; every other class keeps a kernel of its own
FUSIBLE = frozenset({"elementwise", "broadcast", "broadcast_half", "reduction", "reduction_outer", "cast", "cast_widen",
                     "copy", "cat", "gather", "strided", "strided_copy", "strided_cat", "view"})


@dataclass(frozen=True)
class FusedRun:
    """One generated kernel: the step's calls at `members` (in order), the bytes it moves, the FLOPs of its calls."""

    members: tuple[int, ...]
    bytes: int
    flops: float
    backward: bool


def _key(t: TensorMeta) -> int:
    return t.base if t.base is not None else t.id


def _nbytes(t: TensorMeta) -> int:
    return t.distinct_numel * itemsize(t.dtype)


def fusible(call: ReportedCall, cls: str) -> bool:
    return call.kind == "view" or cls in FUSIBLE


def fused_runs(calls: Sequence[ReportedCall], classes: Sequence[str]) -> list[FusedRun | int]:
    """The step in launch order: a FusedRun for each group of fusible calls, the index of every other call. A group
    starts as a run of consecutive fusible calls (one phase, no sync inside); a run whose outputs the next run of its
    phase reads, and no extern call between them does, joins that run (Inductor fuses by dataflow, not by program
    order: SwiGLU's silu before the up projection's GEMM and the multiply after it are one kernel). Views alone
    launch nothing and are left out."""
    syncing = sync_ops()
    readers: dict[int, list[int]] = {}
    for i, c in enumerate(calls):
        if c.kind != "view":
            for t in c.inputs:
                readers.setdefault(_key(t), []).append(i)
    order: list[list[int] | int] = []
    i, n = 0, len(calls)
    while i < n:
        c = calls[i]
        if not fusible(c, classes[i]) or base_name(c.op) in syncing:
            order.append(i)
            i += 1
            continue
        j = i
        while j < n and fusible(calls[j], classes[j]) and calls[j].phase == c.phase and base_name(calls[j].op) not in syncing:
            j += 1
        order.append(list(range(i, j)))
        i = j
    merged = _merge_by_dataflow(calls, order, readers, syncing)
    out: list[FusedRun | int] = []
    for item in merged:
        if isinstance(item, int):
            out.append(item)
        else:
            run = _run(calls, item, classes, readers)
            if run is not None:
                out.append(run)
    return out


def _outputs(calls: Sequence[ReportedCall], members: list[int]) -> set[int]:
    return {_key(t) for m in members if calls[m].kind != "view" for t in calls[m].outputs}


def _merge_by_dataflow(calls: Sequence[ReportedCall], order: list[list[int] | int], readers: dict[int, list[int]],
                       syncing: frozenset[str]) -> list[list[int] | int]:
    """Each run joins the next run of its phase when that run reads its outputs and no call between them does."""
    out: list[list[int] | int] = []
    pending: list[int] | None = None  # a run waiting to see whether the next run takes it
    between: list[int] = []  # extern calls since it
    for item in order:
        if isinstance(item, int):
            if pending is not None:
                c = calls[item]
                if base_name(c.op) in syncing or c.phase != calls[pending[0]].phase:
                    out.append(pending)
                    out.extend(between)
                    pending, between = None, []
                    out.append(item)
                    continue
                between.append(item)
            else:
                out.append(item)
            continue
        if pending is not None:
            made = _outputs(calls, pending)
            later = {r for k in made for r in readers.get(k, ())}
            if calls[item[0]].phase == calls[pending[0]].phase and later & set(item) and not later & set(between):
                item = pending + item  # the extern calls between run before the joined kernel
            else:
                out.append(pending)
            out.extend(between)
        pending, between = item, []
    if pending is not None:
        out.append(pending)
        out.extend(between)
    return out


def _run(calls: Sequence[ReportedCall], members: list[int], classes: Sequence[str],
         readers: dict[int, list[int]]) -> FusedRun | None:
    inside = set(members)
    made: set[int] = set()
    reads: dict[int, int] = {}
    writes: dict[int, int] = {}
    flops = 0.0
    compute = False
    for m in members:
        c = calls[m]
        if c.kind == "view":  # reads nothing itself: what reads the view reads its base's bytes
            continue
        compute = True
        flops += c.cost.flops
        out_bytes = sum(_nbytes(t) for t in c.outputs)
        for pos, t in enumerate(c.inputs):
            k = _key(t)
            if k not in made:
                # a gather reads the rows it takes, not the whole table (an embedding's weight)
                b = min(_nbytes(t), out_bytes) if pos == 0 and classes[m] == "gather" else _nbytes(t)
                reads[k] = max(reads.get(k, 0), b)
        for t in c.outputs:  # an in-place op's output is its input: read above if from outside, written here
            made.add(_key(t))
            writes[_key(t)] = max(writes.get(_key(t), 0), _nbytes(t))
    if not compute:
        return None
    first = members[0]
    kept = sum(b for k, b in writes.items()
               if not readers.get(k) or any(r not in inside and r > first for r in readers[k]))
    return FusedRun(tuple(members), sum(reads.values()) + kept, flops, calls[first].phase == "backward")


class DeviceTime:
    """The device time of a fused run on a chip: its bytes at the elementwise class's memory rate, its FLOPs at the
    class's compute rate, plus the class's fixed cost of one kernel."""

    def __init__(self, model: TimingModel, bandwidth: float, peak_flops: float) -> None:
        r = model.rates("elementwise")
        self.rates = r
        self.bandwidth = bandwidth
        self.peak = peak_flops

    def __call__(self, run: FusedRun) -> float:
        r = self.rates
        memory = run.bytes / (self.bandwidth * r.memory) if run.bytes else 0.0
        compute = run.flops / (self.peak * r.compute) if run.flops else 0.0
        return max(memory, compute) + r.fixed_s


def compiled_issue(calls: Sequence[ReportedCall], classes: Sequence[str], own: Sequence[Issued],
                   device_s: DeviceTime) -> list[Issued]:
    """What the simulation issues in compile mode: a fused run as one kernel of its traffic's time, every other call
    as in eager (its own kernel and device time, `own[i]`), marked as a generated or an extern launch."""
    issued: list[Issued] = []
    for item in fused_runs(calls, classes):
        if isinstance(item, int):
            o = own[item]
            if o.view:
                continue
            issued.append(Issued(o.device_s, False, o.backward, o.sync, 0.0, launch="extern"))
        else:
            issued.append(Issued(device_s(item), False, item.backward, False, 0.0, launch="generated"))
    return issued
