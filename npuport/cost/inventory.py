"""The operator inventory: recorded calls -> ops as the target backend dispatches them -> costs, roofline time,
bound and hot / medium / cold class per scenario -> one entry per op merged across scenarios.

Pure functions over `Trace` records; nothing here touches a tensor.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, NamedTuple, Sequence

from npuport.cost.fused import CompiledPlan, DeviceTime, FusedRun, compiled_issue, plan
from npuport.cost.op_costs import CallCost, backward_frame_cost, base_name, call_cost, frame_cost, itemsize, op_classes
from npuport.cost.roofline import Bound, ChipProfile
from npuport.cost.timing import (
    INDEXED_STORES,
    Issued,
    Mode,
    StepTime,
    TimingModel,
    call_device_s,
    has_compile_costs,
    is_broadcast,
    is_compiled,
    is_implicit_broadcast,
    is_strided,
    is_sync,
    joined_read_ops,
    kernels_by_class,
    op_class,
    op_variant,
    simulate,
    timing_for,
)
from npuport.trace.records import ApiFrame, OpCall, TensorMeta, TensorRef, Trace

_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")
CLASS_RANK = {"hot": 0, "medium": 1, "cold": 2}


@functools.lru_cache(maxsize=1 << 16)  # a model has a few thousand module paths; every call asks for its own
def module_pattern(path: str) -> str:
    """'model.layers.3.mlp.down_proj' -> 'model.layers.*.mlp.down_proj'; '' -> '(root)'."""
    return _LAYER_INDEX.sub(".*", path) if path else "(root)"


@dataclass(slots=True)  # one per recorded call: a million for a per-token scan (npuport.trace.records)
class ReportedCall:
    """One op as the target backend runs it: an aten call, or a composite the backend implements natively."""

    op: str
    kind: str
    phase: str
    module: str
    module_type: str
    source: str | None
    api: str | None
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    cost: CallCost
    index: int
    children: tuple[str, ...] = ()  # the CPU-traced aten ops this native composite stands for
    time_s: float = 0.0
    roofline_s: float = 0.0  # the roofline lower bound of time_s
    costed_on: str = ""  # the chip time_s was estimated for
    indices: tuple[int, ...] = ()  # trace indices of the recorded calls this reported call covers
    args: tuple = ()  # the call's arguments, tensors as TensorRef into `inputs` (for rebuilding it: bench)
    kwargs: dict = field(default_factory=dict)
    bound: Bound = "none"
    # what picks its timing class, whatever the chip: (class, variant wanted, strided, broadcast, widening); set on
    # first use (the step is simulated for every chip of the comparison)
    layout: tuple | None = field(default=None, compare=False, repr=False)
    kind_id: int = field(default=-1, compare=False, repr=False)  # one number per distinct (layout, cost): _kind_id
    # the call of an identical layer this one copies (npuport.trace.reuse), built before it: its cost, layout, times
    # and shape signature are this call's, taken rather than worked out again
    template: "ReportedCall | None" = field(default=None, compare=False, repr=False)
    signature: str = field(default="", compare=False, repr=False)  # shape_signature, set on first use
    # a scalar read that continues the one before it (the next element of one `.tolist()`): no sync of its own
    # (mark_joined_reads, is_sync)
    joined_read: bool = False


_KINDS: dict[tuple, int] = {}


def _kind_id(c: ReportedCall) -> int:
    """A number for what a call's device time depends on besides the chip, shared by calls that repeat it."""
    if c.kind_id < 0:
        c.kind_id = _KINDS.setdefault((c.layout or _layout_of(c), c.cost), len(_KINDS))
    return c.kind_id


def reported_calls(trace: Trace, native_composites: frozenset[str]) -> list[ReportedCall]:
    """Replace the CPU decomposition of every composite the target implements natively by the composite itself.

    Forward calls are grouped by the ApiFrame that issued them, backward calls by the frame whose autograd nodes
    they run, so e.g. SDPA forward and its backward each become one `aten::scaled_dot_product_attention` call.
    """
    no_traffic = op_classes().no_traffic
    out: list[ReportedCall] = []
    groups: dict[tuple[int, str], list[OpCall]] = {}
    slots: dict[tuple[int, str], int] = {}
    key: tuple[int, str]
    copy_of = trace.copy_of  # a copied layer's call -> its template's (npuport.trace.reuse)
    built: dict[int, ReportedCall] = {}
    for call in trace.calls:
        frame = trace.frames.get(call.frame) if call.frame is not None else None
        if frame is not None and frame.op in native_composites:
            key = (frame.id, call.phase)
            if key not in groups:
                groups[key] = []
                slots[key] = len(out)
                out.append(None)  # type: ignore[arg-type]  # filled below, keeps execution order
            groups[key].append(call)
            continue
        # the first call built of its template (the template itself, or in backward, where the copies of later
        # layers run first, an earlier copy): every call of one template has the same numbers
        first = copy_of.get(call.index, call.index)
        tpl = built.get(first) if copy_of else None
        kind = tpl.kind if tpl is not None else "view" if base_name(call.op) in no_traffic else call.kind
        made = ReportedCall(call.op, kind, call.phase, call.module, call.module_type, call.source, call.api,
                            call.inputs, call.outputs, tpl.cost if tpl is not None else call_cost(call), call.index,
                            indices=(call.index,), args=call.args, kwargs=call.kwargs, template=tpl)
        if copy_of and tpl is None:
            built[first] = made
        out.append(made)
    for key, children in groups.items():
        frame = trace.frames[key[0]]
        out[slots[key]] = _frame_call(frame, key[1], children)
    mark_joined_reads(out)
    return out


def mark_joined_reads(calls: Sequence[ReportedCall]) -> None:
    """Mark the scalar reads that one torch-level call makes of several elements as one read. On fake tensors
    `.tolist()` reads each element with its own `.item()` (one `_local_scalar_dense` each); on a device it copies the
    tensor to the host once. A read of an element of the same tensor (views resolve to one base), from the same line
    and phase as the read that synced, with no kernel queued since, waits for nothing new: `joined_read`. Reads of
    two tensors (`a.item() + b.item()`) stay two syncs, as do reads with a kernel between them."""
    reads = joined_read_ops()
    open_read: tuple[str | None, int, str] | None = None  # (line, base tensor, phase) of the last read that synced
    for c in calls:
        if base_name(c.op) in reads and c.inputs:
            base = c.inputs[0].base
            key = (c.source, base, c.phase) if base is not None else None
            if key is not None and key == open_read:
                c.joined_read = True
                continue
            open_read = key if is_sync(c) else None
        elif c.kind != "view":  # a kernel queued (or another sync): the next read waits for it
            open_read = None


def _frame_call(frame: ApiFrame, phase: str, children: list[OpCall]) -> ReportedCall:
    if phase == "forward":
        cost = frame_cost(frame, children)
        inputs, outputs = frame.inputs, frame.outputs
        module, module_type, source = frame.module, frame.module_type, frame.source
    else:
        cost = backward_frame_cost(frame, children)
        inputs, outputs = frame.inputs, frame.outputs
        module, module_type, source = frame.module, frame.module_type, frame.source
    return ReportedCall(frame.op, "compute", phase, module, module_type, source, frame.api, inputs, outputs, cost,
                        children[0].index, tuple(c.op for c in children if c.kind == "compute"),
                        indices=tuple(c.index for c in children),
                        args=frame.args if phase == "forward" else (), kwargs=frame.kwargs if phase == "forward" else {})


def apply_roofline(calls: Iterable[ReportedCall], chip: ChipProfile) -> None:
    """Each call's estimated device time (mappings/timing.yaml: the fraction of peak its class achieves plus its
    fixed cost) and what bounds it on the roofline."""
    model = timing_for(chip)
    for c in calls:
        tpl = c.template
        if tpl is not None and tpl.costed_on == chip.name:  # a copied layer's call: its template's numbers
            c.layout, c.kind_id = tpl.layout, tpl.kind_id
            c.roofline_s, c.bound, c.costed_on, c.time_s = tpl.roofline_s, tpl.bound, tpl.costed_on, tpl.time_s
            continue
        roof, c.bound = chip.roofline(c.cost.flops, c.cost.bytes, c.cost.dtype, c.cost.matrix)
        c.roofline_s = roof
        c.costed_on = chip.name
        c.time_s = _device_s(c, model, chip)


def _device_s(c: ReportedCall, model: TimingModel, chip: ChipProfile) -> float:
    cls, want, strided, broadcast, widening = c.layout or _layout_of(c)
    return call_device_s(model, chip, want if want is not None and want in model.classes else cls, c.cost.flops,
                         c.cost.bytes, c.cost.dtype, c.cost.matrix, strided, broadcast, widening)


def timing_class(c: ReportedCall, model: TimingModel) -> str:
    """The timing class of a call: its op's class, or the variant of it that its operands pick (op_variant)."""
    cls, want = (c.layout or _layout_of(c))[:2]
    return want if want is not None and want in model.classes else cls


def _layout_of(c: ReportedCall) -> tuple:
    """What picks a call's timing class on any chip: its op's class and the variant its operands ask for (op_variant),
    (an input is a strided view, an input is broadcast, the op widens its dtype); kept on the call."""
    base = base_name(c.op)
    cls = op_class(base, c.kind)
    acc = c.kwargs.get("accumulate", c.args[3] if len(c.args) > 3 else False) if base in INDEXED_STORES else None
    # an indexed store's indices (its second input) against the rows of the tensor stored into: with more indices
    # than rows some row is certainly hit twice; with as many or fewer they are taken as distinct (an MoE's
    # permutation of its tokens), which a trace of shapes cannot prove
    repeats = (len(c.inputs) >= 3 and bool(c.inputs[0].shape)
               and math.prod(c.inputs[1].shape) > c.inputs[0].shape[0]) if acc else True
    backward = c.phase == "backward" or base.endswith(("_backward", "_grad"))
    want = op_variant(base, cls, tuple(len(t.shape) for t in c.inputs), bool(acc) if acc is not None else None, None,
                      backward=backward, repeats=repeats, sort_len=_sort_len(base, c) if cls == "sort" else None,
                      reduces_inner=_reduces_inner(base, c) if cls == "reduction" else True)
    strided = any(is_strided(t.shape, t.stride) for t in c.inputs)
    out = tuple(c.outputs[0].shape) if c.outputs else ()
    broadcast = any(is_broadcast(t.stride, t.shape) or is_implicit_broadcast(tuple(t.shape), out) for t in c.inputs)
    widening = bool(c.inputs and c.outputs) and itemsize(c.outputs[0].dtype) > itemsize(c.inputs[0].dtype)
    c.layout = (cls, None if want == cls else want, strided, broadcast, widening)
    return c.layout


def _sort_len(base: str, c: ReportedCall) -> int | None:
    """The length of the dim a sort orders: `dim` as given (positional after self for sort / argsort, keyword in
    their stable overloads, third for kthvalue), else the last dim; msort orders dim 0."""
    if not c.inputs or not c.inputs[0].shape:
        return None
    shape = c.inputs[0].shape
    if base == "msort":
        dim = 0
    elif base == "kthvalue":  # kthvalue(self, k, dim=-1): its second argument is k
        dim = c.kwargs.get("dim", c.args[2] if len(c.args) > 2 else -1)
    else:
        dim = c.kwargs.get("dim", c.args[1] if len(c.args) > 1 and isinstance(c.args[1], int) and not isinstance(c.args[1], bool) else -1)
    try:
        return int(shape[dim])
    except (IndexError, TypeError):
        return None


# reductions whose second argument (or `dim=`) names the dims reduced; the others reduce their last dim or all
_DIM_REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "prod", "var", "std", "var_mean", "logsumexp", "all", "any"})


def _reduces_inner(base: str, c: ReportedCall) -> bool:
    """Whether a reduction runs along the innermost dim that has more than one element (a row reduction), or over
    everything; False for one along an outer dim only (sum of [T, k, H] over k)."""
    if base not in _DIM_REDUCTIONS or not c.inputs or not c.inputs[0].shape:
        return True
    dim = c.kwargs.get("dim", c.args[1] if len(c.args) > 1 else None)
    if dim is None or isinstance(dim, bool):
        return True
    dims = [dim] if isinstance(dim, int) else list(dim) if isinstance(dim, (list, tuple)) else None
    if not dims or not all(isinstance(d, int) for d in dims):
        return True  # every dim (an empty list) or a form not read here: taken as a row reduction
    shape = c.inputs[0].shape
    rank = len(shape)
    try:
        reduced = {d % rank for d in dims}
    except ZeroDivisionError:
        return True
    inner = max((i for i, n in enumerate(shape) if n > 1), default=rank - 1)
    return inner in reduced


def compiled_plan(calls: Sequence[ReportedCall]) -> CompiledPlan:
    """The calls as torch.compile launches them (npuport.cost.fused), by each call's class on no chip in particular."""
    classes = []
    for c in calls:
        cls, want = (c.layout or _layout_of(c))[:2]
        classes.append("view" if c.kind == "view" else want or cls)
    return plan(calls, classes)


class GraphInputs(NamedTuple):
    """A step's inputs that are not parameters (token ids, a decode step's KV cache): what a reduce-overhead replay
    copies into its graph's own buffers first."""

    bytes: int = 0
    tensors: int = 0


NO_GRAPH_INPUTS = GraphInputs()


def step_time(calls: Sequence[ReportedCall], chip: ChipProfile, mode: Mode = "eager",
              model: TimingModel | None = None, compiled: CompiledPlan | None = None,
              graph_inputs: GraphInputs = NO_GRAPH_INPUTS) -> StepTime:
    """The step on `chip`: its host thread issuing the calls in order to one device queue (npuport.cost.timing);
    `model` replaces the chip's timing model (mappings/timing.yaml) when given; `compiled`, the calls' compiled_plan
    when the caller has it (it is the same on every chip). graph_inputs: in reduce-overhead mode each replay first
    copies the step's inputs that are not parameters into its graph's own input buffers (CUDA graph trees copy every
    non-static input: torch/_inductor/cudagraph_trees.py, `_copy_inputs_and_remove_from_src`): one copy kernel per
    tensor, as a lent H100 ran them (torch 2.11: `aten::copy_` once per cache tensor and step), each costing the host
    `graph_input_s` before the replay is launched."""
    model = model or timing_for(chip)
    own = model is timing_for(chip)
    issued = []
    # a layer's calls repeat in every layer: each kind of call (its layout and cost, which decide its device time on
    # a chip, and what the simulation reads besides: whether it syncs, by its arguments too) is made into an Issued
    # once per step
    made: dict[tuple[int, str, str, str, bool], Issued] = {}
    for c in calls:
        sync = is_sync(c)
        key = (c.kind_id if c.kind_id >= 0 else _kind_id(c), c.op, c.kind, c.phase, sync)
        item = made.get(key)
        if item is None:
            dev = c.time_s if own and chip.name == c.costed_on else _device_s(c, model, chip)
            cls = timing_class(c, model) if c.kind != "view" else "view"
            extra = model.host.extra_s(cls) if c.kind != "view" else 0.0
            item = made[key] = Issued(dev, c.kind == "view", c.phase == "backward", sync, extra, cls=cls)
        issued.append(item)
    if is_compiled(mode):  # the same calls as Inductor would launch them: fused runs and extern kernels
        issued = compiled_issue(compiled or compiled_plan(calls), calls, issued,
                                DeviceTime(model, chip.memory_bandwidth, chip.peak_flops("float32", False)),
                                lambda i: timing_class(calls[i], model))
    if mode == "reduce-overhead" and graph_inputs.bytes > 0:  # each tensor read and written once, at copy's rates
        n = max(1, graph_inputs.tensors)
        copy = call_device_s(model, chip, "copy", 0.0, 2.0 * graph_inputs.bytes / n, "bfloat16", False)
        issued = [*[Issued(copy, False, False, False, model.host.graph_input_s or 0.0, "input", "copy")] * n, *issued]
    step = simulate(model, issued, mode)
    # the kernels per class, for a step whose kernels a profile cannot tie to aten ops (a compiled step, a replay)
    return replace(step, classes=kernels_by_class(issued)) if mode != "eager" else step


def shape_signature(call: ReportedCall) -> str:
    return " ".join("x".join(str(s) for s in t.shape) or "scalar" for t in call.inputs) or "-"


def _plain_tree(x: object) -> object:
    if isinstance(x, TensorRef):
        return {"tensor": x.index}
    if isinstance(x, (list, tuple)):
        return [_plain_tree(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain_tree(v) for k, v in x.items()}
    return x


def example_json(c: ReportedCall) -> dict:
    """One call in plain JSON: enough to rebuild it with random tensors of the recorded shape, dtype, stride."""
    inputs = []
    for t in c.inputs:
        d: dict = {"shape": list(t.shape), "dtype": t.dtype}
        if t.stride is not None:
            d["stride"] = list(t.stride)
        inputs.append(d)
    return {"inputs": inputs, "args": _plain_tree(c.args), "kwargs": _plain_tree(c.kwargs)}


@dataclass
class ScenarioOpStats:
    calls: int = 0
    flops: float = 0.0
    bytes: int = 0
    time_s: float = 0.0
    compute_bound_s: float = 0.0
    share: float = 0.0
    cls: str = "cold"
    shapes: Counter = field(default_factory=Counter)
    shape_time: Counter = field(default_factory=Counter)
    dtypes: Counter = field(default_factory=Counter)
    modules: Counter = field(default_factory=Counter)
    module_types: Counter = field(default_factory=Counter)
    sources: Counter = field(default_factory=Counter)
    apis: Counter = field(default_factory=Counter)
    phases: Counter = field(default_factory=Counter)
    children: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # shape signature -> one recorded call of that shape

    @property
    def bound(self) -> Bound:
        if self.time_s == 0.0:
            return "none"
        return "compute" if self.compute_bound_s >= self.time_s / 2 else "memory"

    def add(self, c: ReportedCall) -> None:
        self.calls += 1
        self.flops += c.cost.flops
        self.bytes += c.cost.bytes
        self.time_s += c.time_s
        if c.bound == "compute":
            self.compute_bound_s += c.time_s
        sig = c.signature or (c.template.signature if c.template is not None else "") or shape_signature(c)
        c.signature = sig
        if sig not in self.examples and (c.args or c.kwargs):
            self.examples[sig] = example_json(c)
        self.shapes[sig] += 1
        self.shape_time[sig] += c.time_s  # type: ignore[assignment]  # a Counter of seconds; typeshed types Counter values as int
        self.dtypes.update({t.dtype for t in (c.inputs or c.outputs)})
        self.modules[module_pattern(c.module)] += 1
        if c.module_type:
            self.module_types[c.module_type] += 1
        if c.source:
            self.sources[c.source] += 1
        if c.api:
            self.apis[c.api] += 1
        self.phases[c.phase] += 1
        self.children.update(c.children)


@dataclass
class OpEntry:
    op: str
    kind: str
    matrix: bool
    fused: bool
    by_scenario: dict[str, ScenarioOpStats]
    time_share: float = 0.0
    cls: str = "cold"

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.by_scenario.values())

    @property
    def flops(self) -> float:
        return sum(s.flops for s in self.by_scenario.values())

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.by_scenario.values())

    @property
    def bounds(self) -> dict[str, Bound]:
        return {name: s.bound for name, s in self.by_scenario.items() if s.bound != "none"}

    @property
    def bound(self) -> str:
        kinds = set(self.bounds.values())
        return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "none")

    @property
    def bound_flips(self) -> bool:
        return len(set(self.bounds.values())) > 1

    def merged(self, attr: str) -> Counter:
        total: Counter = Counter()
        for s in self.by_scenario.values():
            total.update(getattr(s, attr))
        return total


@dataclass
class ModuleEntry:
    module: str
    module_type: str
    by_scenario: dict[str, tuple[int, float, float]]  # scenario -> (calls, time_s, share)
    time_share: float = 0.0


@dataclass
class ScenarioTotals:
    name: str
    calls: int
    compute_calls: int
    flops: float
    bytes: int
    time_s: float
    time_by_chip: dict[str, float]  # the step's wall time (step.step_s) per chip
    roofline_s: float = 0.0
    step: StepTime | None = None
    # a host-bound eager step simulated again as one captured graph (no host cost per op): what graph mode would give
    as_graph: StepTime | None = None
    graph_inputs: GraphInputs = NO_GRAPH_INPUTS  # reduce-overhead: the inputs each replay copies into its graph
    # the step's device time (kernels busy, StepTime.device_s) per chip: what communication can hide behind, on the
    # same footing for every chip (time_by_chip is the wall, host included)
    device_by_chip: dict[str, float] = field(default_factory=dict)


@dataclass
class Inventory:
    chip: ChipProfile
    scenarios: list[str]
    ops: list[OpEntry]
    modules: list[ModuleEntry]
    totals: dict[str, ScenarioTotals]
    calls: dict[str, list[ReportedCall]]
    native_composites: frozenset[str]
    # the scenarios in a torch.compile mode: what their calls become (npuport.cost.fused), made once per scenario
    compiled: dict[str, CompiledPlan] = field(default_factory=dict)

    def compiled_kernels(self, scenario: str) -> dict[int, int]:
        """Trace index -> the compiled kernel that runs it (a fused run's number, or its own for an extern call), for
        a scenario in a torch.compile mode; {} for an eager or graph one. Views outside a fused run launch nothing
        and are not in it."""
        plan = self.compiled.get(scenario)
        if plan is None:
            return {}
        calls = self.calls[scenario]
        out: dict[int, int] = {}
        for k, item in enumerate(plan.items):
            for pos in (item.members if isinstance(item, FusedRun) else (item,)):
                for index in calls[pos].indices:
                    out[index] = k
        return out


def _classify(entries: Sequence[tuple[str, ScenarioOpStats, bool, str]]) -> None:
    """Hot: ops covering the first `hot_share` of time; medium: remaining memory-bound vector ops worth fusing."""
    oc = op_classes()
    ranked = sorted((e for e in entries if e[3] == "compute"), key=lambda e: -e[1].time_s)
    cumulative = 0.0
    for op, stats, matrix, _kind in ranked:
        if stats.time_s <= 0:
            stats.cls = "cold"
        elif cumulative < oc.hot_share:
            stats.cls = "hot"
        elif not matrix and stats.bound == "memory" and stats.share >= oc.medium_min_share:
            stats.cls = "medium"
        else:
            stats.cls = "cold"
        cumulative += stats.share


def build_inventory(traces: Mapping[str, Trace], chip: ChipProfile, native_composites: frozenset[str],
                    all_chips: Mapping[str, ChipProfile] | None = None,
                    modes: Mapping[str, Mode] | None = None) -> Inventory:
    oc = op_classes()
    per_scenario: dict[str, list[ReportedCall]] = {}
    entries: dict[str, OpEntry] = {}
    totals: dict[str, ScenarioTotals] = {}
    module_time: dict[str, dict[str, list]] = defaultdict(dict)
    module_types: dict[str, str] = {}
    plans: dict[str, CompiledPlan] = {}
    for name, trace in traces.items():
        calls = reported_calls(trace, native_composites)
        apply_roofline(calls, chip)
        per_scenario[name] = calls
        step = sum(c.time_s for c in calls)
        for c in calls:
            entry = entries.get(c.op)
            if entry is None:
                entry = entries[c.op] = OpEntry(c.op, c.kind, c.cost.matrix, base_name(c.op) in oc.fused or c.op in native_composites, {})
            stats = entry.by_scenario.get(name)
            if stats is None:  # not setdefault: that would build (ten Counters) for every call
                stats = entry.by_scenario[name] = ScenarioOpStats()
            stats.add(c)
            pattern = module_pattern(c.module)
            slot = module_time[pattern].setdefault(name, [0, 0.0])
            slot[0] += 1
            slot[1] += c.time_s
            if c.module_type and pattern not in module_types:
                module_types[pattern] = c.module_type
        for entry in entries.values():
            stats = entry.by_scenario.get(name)
            if stats is not None:
                stats.share = stats.time_s / step if step else 0.0
        _classify([(e.op, e.by_scenario[name], e.matrix, e.kind) for e in entries.values() if name in e.by_scenario])
        mode = (modes or {}).get(name, "eager")
        compiled = compiled_plan(calls) if is_compiled(mode) else None  # the same on every chip: made once
        if compiled is not None:
            plans[name] = compiled
        mem = trace.memory
        copied = (GraphInputs(int(mem.copied_inputs), int(mem.input_tensors)) if mode == "reduce-overhead" and mem is not None
                  else NO_GRAPH_INPUTS)
        simulated = step_time(calls, chip, mode, compiled=compiled, graph_inputs=copied)
        by_chip, device_by_chip = {}, {}
        for other in (all_chips or {chip.name: chip}).values():  # the target's step is simulated once, above
            if other is not chip and is_compiled(mode) and not has_compile_costs(timing_for(other)):
                continue  # a chip whose timing model has no torch.compile host costs gives no compiled time
            on = simulated if other is chip else step_time(calls, other, mode, compiled=compiled, graph_inputs=copied)
            by_chip[other.name], device_by_chip[other.name] = on.step_s, on.device_s
        as_graph = step_time(calls, chip, "graph") if mode == "eager" and simulated.bound == "host" else None
        totals[name] = ScenarioTotals(
            name, len(calls), sum(1 for c in calls if c.kind == "compute"), sum(c.cost.flops for c in calls),
            sum(c.cost.bytes for c in calls), step, by_chip, sum(c.roofline_s for c in calls), simulated, as_graph,
            copied, device_by_chip,
        )
    n = len(traces) or 1
    for entry in entries.values():
        entry.time_share = sum(s.share for s in entry.by_scenario.values()) / n
        entry.cls = min((s.cls for s in entry.by_scenario.values()), key=CLASS_RANK.__getitem__)
    modules = []
    for pattern, by in module_time.items():
        shares = {sc: (calls, t, t / totals[sc].time_s if totals[sc].time_s else 0.0) for sc, (calls, t) in by.items()}
        modules.append(ModuleEntry(pattern, module_types.get(pattern, ""), shares, sum(v[2] for v in shares.values()) / n))
    modules.sort(key=lambda m: -m.time_share)
    ops = sorted(entries.values(), key=lambda e: (e.kind != "compute", -e.time_share, e.op))
    return Inventory(chip, list(traces), ops, modules, totals, per_scenario, native_composites, plans)
