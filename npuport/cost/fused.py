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
from typing import Callable, Protocol, Sequence

from npuport.cost.op_costs import CallCost, base_name, is_causal_call, itemsize
from npuport.cost.timing import Issued, TimingModel, inductor_fallback_ops, is_sync
from npuport.trace.records import TensorMeta, TensorRef


class Call(Protocol):
    """What a fused run reads of a step's call (npuport.cost.inventory.Call has it)."""

    op: str
    kind: str
    phase: str
    index: int
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    args: tuple
    kwargs: dict

    @property
    def cost(self) -> CallCost: ...

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
    kernels: int = 1  # the kernels Inductor makes of it (kernel_count)


def _key(t: TensorMeta) -> int:
    return t.base if t.base is not None else t.id


def _nbytes(t: TensorMeta) -> int:
    return t.distinct_numel * itemsize(t.dtype)


# Scatters Inductor lowers to generated kernels (a store, with atomic adds where it accumulates) instead of handing
# them to ATen: torch/_inductor/lowering.py `index_put_impl_` and `scatter_fallback`, torch/_inductor/utils.py
# `needs_fallback_due_to_atomic_add_limitations` and `use_scatter_fallback`, torch/_inductor/decomposition.py
# `index_add`, torch/_decomp `index_copy` (torch 2.11-2.13). Measured on a lent
# H100: OLMoE's compiled training step ran its expert dispatch's index_put backward as `triton_*_index_put_*` kernels
# (docs/profile.md, "Compiled training steps"). They still go to ATen with a boolean index (but one mask written with
# one value is a masked fill), with an accumulation into int64 or bool or a tensor source of those, an index_add in
# bf16, under torch.use_deterministic_algorithms, and for bf16 accumulation on CUDA before sm90 (A100):
# the plan is the same on every chip, so that last case is not told apart (docs/profile.md says so).
_INDEX_PUT = frozenset({"index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"})
_INDEX_COPY = frozenset({"index_copy", "index_copy_"})  # decomposed into index_put (torch/_decomp, core aten)
_INDEX_ADD = frozenset({"index_add", "index_add_"})  # decomposed into an accumulating index_put, but bf16 falls back
_SCATTER = frozenset({"scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"})
_NO_ATOMIC_ADD = frozenset({"int64", "bool"})


def _arg(call: Call, pos: int, name: str, default: object = None) -> object:
    return call.args[pos] if len(call.args) > pos else call.kwargs.get(name, default)


def _tensor(call: Call, ref: object) -> TensorMeta | None:
    """The recorded input a TensorRef in the call's arguments stands for."""
    return call.inputs[ref.index] if isinstance(ref, TensorRef) and ref.index < len(call.inputs) else None


def lowered_scatter(call: Call) -> bool:
    """Whether Inductor generates the kernel of this scatter (see _INDEX_PUT above), by what the call carries."""
    op = base_name(call.op)
    dtype = call.inputs[0].dtype if call.inputs else ""
    if op in _INDEX_COPY:
        return True
    if op in _INDEX_ADD:  # torch/_inductor/decomposition.py index_add: bf16 keeps ATen's kernel (pytorch#137425)
        return dtype not in _NO_ATOMIC_ADD and dtype != "bfloat16"
    if op in _INDEX_PUT:
        given = _arg(call, 1, "indices")
        raw: list[object] = list(given) if isinstance(given, (list, tuple)) else []
        indices = [_tensor(call, r) for r in raw]
        if any(t is not None and t.dtype in ("bool", "uint8") for t in indices):
            # a mask: ATen's kernel, unless it is one mask written with one value, a masked fill (a generated where)
            values = _tensor(call, _arg(call, 2, "values"))
            return len(raw) == 1 and values is not None and values.numel == 1
        return not (_arg(call, 3, "accumulate", False) and dtype in _NO_ATOMIC_ADD)
    if op not in _SCATTER:
        return False
    src = _tensor(call, _arg(call, 3, "src"))  # a tensor source (scatter.src, scatter_add, scatter_reduce)
    if src is not None and src.dtype in _NO_ATOMIC_ADD:  # use_scatter_fallback: falls back whatever the reduction
        return False
    if op.startswith("scatter_reduce"):
        reduce = _arg(call, 4, "reduce")
    elif op.startswith("scatter_add"):
        reduce = "add"
    else:
        reduce = call.kwargs.get("reduce")
    if reduce is None:
        return True
    return reduce in ("add", "sum") and dtype not in _NO_ATOMIC_ADD


# A sort along at most this many elements is a generated (persistent) Triton kernel; a longer one goes to ATen's
# (CUDA: radix) sort: torch/_inductor/ir.py `Sort.create` (max_rblock 512), lowering.py `sort_stable`. OLMoE's
# compiled decode ran its sort of 8 expert ids inside `triton_per_fused_..._sort_...` on the H200 and the H100, its
# prefill's sort of 16,384 as cub's radix sort kernels.
SORT_GENERATED_MAX = 512


def lowered_sort(call: Call) -> bool:
    if base_name(call.op) != "sort" or not call.inputs:
        return False
    shape = call.inputs[0].shape
    if not shape:
        return True
    dim = _arg(call, 1, "dim", -1) if call.op != "aten::sort.stable" else call.kwargs.get("dim", -1)
    return isinstance(dim, int) and -len(shape) <= dim < len(shape) and shape[dim] <= SORT_GENERATED_MAX


def fusible(call: Call, cls: str) -> bool:
    """Whether Inductor generates this call's kernel (fusing it with its neighbours) rather than calling ATen."""
    if call.kind == "view":
        return True
    if cls in FUSIBLE:
        return base_name(call.op) not in inductor_fallback_ops()
    return (cls.startswith("scatter") and lowered_scatter(call)) or (cls.startswith("sort") and lowered_sort(call))


def fused_runs(calls: Sequence[Call], classes: Sequence[str]) -> list[FusedRun | int]:
    """The step in launch order: a FusedRun for each group of fusible calls, the index of every other call. A group
    starts as a run of consecutive fusible calls (one phase, no sync inside); a run whose outputs the next run of its
    phase reads, and no extern call between them does, joins that run (Inductor fuses by dataflow, not by program
    order: SwiGLU's silu before the up projection's GEMM and the multiply after it are one kernel). Views alone
    launch nothing and are left out."""
    syncing = [is_sync(c) for c in calls]  # by overload and arguments (timing.yaml sync_ops)
    readers: dict[int, list[int]] = {}
    for i, c in enumerate(calls):
        if c.kind != "view":
            for t in c.inputs:
                readers.setdefault(_key(t), []).append(i)
    order: list[list[int] | int] = []
    i, n = 0, len(calls)
    while i < n:
        c = calls[i]
        if not fusible(c, classes[i]) or syncing[i]:
            order.append(i)
            i += 1
            continue
        j = i
        while j < n and fusible(calls[j], classes[j]) and calls[j].phase == c.phase and not syncing[j]:
            j += 1
        if any(calls[m].kind != "view" for m in range(i, j)):  # views alone launch nothing and hold no join back
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


def _outputs(calls: Sequence[Call], members: list[int]) -> set[int]:
    return {_key(t) for m in members if calls[m].kind != "view" for t in calls[m].outputs}


def _merge_by_dataflow(calls: Sequence[Call], order: list[list[int] | int], readers: dict[int, list[int]],
                       syncing: Sequence[bool]) -> list[list[int] | int]:
    """Each run joins the next run of its phase when that run reads its outputs and no call between them does."""
    out: list[list[int] | int] = []
    pending: list[int] | None = None  # a run waiting to see whether the next run takes it
    between: list[int] = []  # extern calls since it
    for item in order:
        if isinstance(item, int):
            if pending is not None:
                c = calls[item]
                if syncing[item] or c.phase != calls[pending[0]].phase:
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


def _run(calls: Sequence[Call], members: list[int], classes: Sequence[str],
         readers: dict[int, list[int]]) -> FusedRun | None:
    inside = set(members)
    made: set[int] = set()
    outside: set[int] = set()  # tensors the run read from outside it
    # by region of a tensor (its storage, offset and shape): two slices of one fused projection are two reads
    reads: dict[tuple[int, int, tuple[int, ...]], int] = {}
    writes: dict[tuple[int, int, tuple[int, ...]], int] = {}
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
                outside.add(k)
                # a gather reads the rows it takes, not the whole table (an embedding's weight)
                b = min(_nbytes(t), out_bytes) if pos == 0 and classes[m] == "gather" else _nbytes(t)
                r = (k, t.storage_offset, t.shape)
                reads[r] = max(reads.get(r, 0), b)
        for t in c.outputs:  # an in-place op's output is its input: read above if from outside, written here
            made.add(_key(t))
            r = (_key(t), t.storage_offset, t.shape)
            writes[r] = max(writes.get(r, 0), _nbytes(t))
    if not compute:
        return None
    first = members[0]
    # written out: what is read after the run, what nothing in the step reads (an output), and every write into a
    # tensor from outside the run (an in-place update of a cache or a gradient)
    out_keys = {k for k, _, _ in writes if k in outside or not readers.get(k)
                or any(r not in inside and r > first for r in readers[k])}
    kept = sum(b for (k, _, _), b in writes.items() if k in out_keys)
    return FusedRun(tuple(members), sum(reads.values()) + kept, flops, calls[first].phase == "backward",
                    kernel_count(calls, members, classes, out_keys))


def kernel_count(calls: Sequence[Call], members: list[int], classes: Sequence[str], out_keys: set[int]) -> int:
    """How many kernels Inductor makes of one fused run, by what it writes out (measured on the H200: the triton
    kernels of compiled TinyLlama, Llama-2-7B and OLMoE steps, docs/profile.md "Compile mode"): each concatenation
    written out is a kernel of its own; outputs of a run with a reduction that share its size come out of one kernel
    (a residual add and the norm after it); in a run without one every output is its own kernel (the rotary
    embedding of q and of k)."""
    reduces = any(classes[m].startswith("reduction") for m in members)
    groups: set[tuple[str, int]] = set()
    for m in members:
        c = calls[m]
        if c.kind == "view":
            continue
        for t in c.outputs:
            k = _key(t)
            if k not in out_keys:
                continue
            if classes[m].startswith("cat") or classes[m] == "strided_cat":
                groups.add(("cat", k))
            elif reduces:
                groups.add(("size", t.distinct_numel))
            else:
                groups.add(("out", k))
    return max(len(groups), 1)


class DeviceTime:
    """The device time of a fused run on a chip: its bytes at the elementwise class's memory rate, its FLOPs at the
    class's compute rate, plus the class's fixed cost of one kernel."""

    def __init__(self, model: TimingModel, bandwidth: float, peak_flops: float) -> None:
        r = model.rates("elementwise")
        self.rates = r
        self.attention_inputs = model.compile_attention
        self.masked_attention = model.compile_masked_attention
        self._host = model.host
        self.bandwidth = bandwidth
        self.peak = peak_flops

    def extern_extra(self, cls: str) -> float:
        """Host seconds an extern kernel of class `cls` costs beyond a GEMM's launch: its eager class extra beyond a
        GEMM's (attention's planning, a sort's several launches), never below 0."""
        return max(self._host.extra_s(cls) - self._host.extra_s("matmul"), 0.0)

    def __call__(self, run: FusedRun) -> float:
        r = self.rates
        memory = run.bytes / (self.bandwidth * r.memory) if run.bytes else 0.0
        compute = run.flops / (self.peak * r.compute) if run.flops else 0.0
        return max(memory, compute) + r.fixed_s


def attention_inputs(call: Call, cls: str, kinds: frozenset[str], mask: bool = True) -> list[FusedRun]:
    """The inputs a compiled attention forward makes for its library kernel, as the chip's timing model lists them
    (`compile_attention` in mappings/timing.yaml): `mask`, the score bias [B, 1, Q, K] written out (a causal step
    included; `mask` False leaves it out); `gqa_kv`, K and V repeated to the query's heads where they have fewer
    (each read and written)."""
    if cls != "attention" or call.phase != "forward" or not kinds or len(call.inputs) < 3:
        return []
    q, k, v = call.inputs[:3]
    if len(q.shape) != 4 or len(k.shape) != 4:
        return []
    b, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    out: list[FusedRun] = []
    if "mask" in kinds and mask:
        out.append(FusedRun((call.index,), b * sq * sk * itemsize(q.dtype), 0.0, False))
    if "gqa_kv" in kinds and hk < hq:
        for t in (k, v):
            out.append(FusedRun((call.index,), _nbytes(t) + b * hq * sk * t.shape[-1] * itemsize(t.dtype), 0.0, False))
    return out


@dataclass(frozen=True)
class CompiledPlan:
    """What a step's calls become under torch.compile, whatever the chip: the fused runs and extern calls in launch
    order (fused_runs), whether the step trains, whether its attention is causal. Made once per scenario; each chip's
    simulation costs it (compiled_issue)."""

    items: list[FusedRun | int]
    classes: list[str]
    training: bool
    causal: bool


def plan(calls: Sequence[Call], classes: list[str]) -> CompiledPlan:
    """`classes`: each call's timing class as op_variant names it, on no chip in particular ("view" for a view)."""
    causal = any(classes[i] == "attention" and c.phase == "forward" and is_causal_call(c.op, c.args, c.kwargs)
                 for i, c in enumerate(calls))
    return CompiledPlan(fused_runs(calls, classes), classes, any(c.phase == "backward" for c in calls), causal)


def compiled_issue(plan: CompiledPlan, calls: Sequence[Call], own: Sequence[Issued], device_s: DeviceTime,
                   host_class: Callable[[int], str]) -> list[Issued]:
    """What the simulation issues in compile mode on one chip: a fused run as its kernels, sharing its traffic's time,
    every other call as in eager (its own kernel and device time, `own[i]`), marked as a generated or an extern
    launch; `host_class(i)` is call i's timing class on this chip, for an extern launch's host extra."""
    issued: list[Issued] = []
    classes = plan.classes
    # an inference graph writes the bias out for every attention; a training graph once, kept for the backward
    masked = False
    # with its bias written out, a causal attention is a masked one: the kernel no longer skips the masked half, and
    # the masked kernel is slower besides (timing.yaml compile_masked_attention: Llama-2-7B's compiled prefill on the
    # H200, cuDNN attention 7.8 ms a step against 2.65 ms estimated causal)
    unskipped = plan.causal and "mask" in device_s.attention_inputs
    for item in plan.items:
        if isinstance(item, int):
            o = own[item]
            if o.view:
                if o.sync:  # a value read back (.item(), .tolist()): no kernel, but the host waits and the graph breaks
                    issued.append(Issued(0.0, True, o.backward, True, 0.0, launch="sync", cls=o.cls or "view"))
                continue
            extras = attention_inputs(calls[item], classes[item], device_s.attention_inputs, not (plan.training and masked))
            masked = masked or bool(extras)
            for extra in extras:
                issued.append(Issued(device_s(extra), False, o.backward, False, 0.0, launch="generated", cls="generated"))
            dev = (device_s.masked_attention[o.backward] * o.device_s if unskipped and classes[item].startswith("attention")
                   else o.device_s)
            issued.append(Issued(dev, False, o.backward, o.sync, device_s.extern_extra(host_class(item)), launch="extern",
                                 cls=o.cls or classes[item]))
        else:  # its traffic split over its kernels, each with its launch and fixed cost
            each = device_s(item) / item.kernels + device_s.rates.fixed_s * (1 - 1 / item.kernels)
            issued.extend(Issued(each, False, item.backward, False, 0.0, launch="generated", cls="generated")
                          for _ in range(item.kernels))
    return issued
