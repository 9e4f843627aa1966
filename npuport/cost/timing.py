"""The step-time model (mappings/timing.yaml): device time per call from the chip's peaks and the fraction of them
each op class achieves, host time per call in eager mode, and the step as a host thread feeding one device queue.

    device(call) = max(FLOPs / (peak x compute), bytes / (bandwidth x memory)) + fixed_s     (0 for a view op)
    host(call)   = forward_call_s | backward_call_s | view_call_s  (+ its class's extra)       (eager; 0 in graph mode)

The simulation walks the calls in trace order: the host clock advances by host(call); the call's kernel starts at
max(host clock, device clock + kernel_gap_s) and ends device(call) later (kernel_gap_s: the device's gap between
back-to-back kernels, which a profile's per-op kernel time leaves out); a synchronizing op (a value read back) moves the host
clock to the device clock. The step ends when both are done. A chip without its own entry takes its family's
(`families:`), which says it is assumed, and the report says which numbers are unverified.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Literal, Mapping, Protocol

from npuport.cost.roofline import ChipProfile
from npuport.errors import MappingError
from npuport.mappings import load_checked
from npuport.trace.records import TensorMeta, TensorRef

_FILE = "timing.yaml"
Mode = Literal["eager", "graph", "compile", "reduce-overhead"]
MODES: tuple[Mode, ...] = ("eager", "graph", "compile", "reduce-overhead")
COMPILED: tuple[Mode, ...] = ("compile", "reduce-overhead")  # modes whose kernels are Inductor's (npuport.cost.fused)


def is_compiled(mode: str) -> bool:
    """The step's kernels are torch.compile's (fused runs, extern library kernels), not the eager ops'."""
    return mode in COMPILED


def as_mode(text: str) -> Mode:
    """A scenario's mode (npuport.model.scenarios checks the spelling) as the step model's."""
    for m in MODES:
        if m == text:
            return m
    raise ValueError(f"unknown step mode {text!r}: one of {', '.join(MODES)}")


@dataclass(frozen=True)
class ClassRates:
    compute: float
    memory: float
    fixed_s: float


@dataclass(frozen=True)
class HostCosts:
    forward_call_s: float
    backward_call_s: float
    view_call_s: float
    graph_launch_s: float
    reference_probe_s: float | None = None  # host probe (s per tiny eager op) of the host these costs were fit on
    # what a call of a class costs the host beyond a tiny add, in tiny adds (host probes): a GEMM's library call, a
    # sort's several launches, an indexed store's checks (scripts/calibrate_timing.py measures each class)
    class_extra: tuple[tuple[str, float], ...] = ()
    # torch.compile's default mode (npuport.cost.fused): per call of a compiled graph (guards, the autograd wrapper)
    # and per kernel its wrapper launches, a generated (Triton) kernel or an extern one (a GEMM, attention); None
    # where the chip's model has no such measurement (then no compile-mode time is given)
    compile_graph_s: float | None = None
    compile_kernel_s: float | None = None
    compile_extern_s: float | None = None
    compile_source: str = ""
    # torch.compile mode="reduce-overhead": host seconds per input tensor each replay copies into its graph's buffers
    # (a decode step's cache: two per layer); None where not measured (then the copies cost the host nothing)
    graph_input_s: float | None = None
    graph_input_source: str = ""

    def extra_s(self, cls: str) -> float:
        """Host seconds a call of timing class `cls` costs beyond the per-call cost (0 without a reference probe)."""
        if not self.reference_probe_s or not self.class_extra:
            return 0.0
        table = dict(self.class_extra)
        name = cls
        while name not in table and "_" in name:  # a variant without its own entry takes its class's: sort_radix -> sort
            name = name.rsplit("_", 1)[0]
        return table.get(name, 0.0) * self.reference_probe_s

    def scaled(self, probe_s: float) -> HostCosts:
        """These costs on a host whose probe reads `probe_s` (linear in the probe; unchanged without a reference)."""
        if not self.reference_probe_s:
            return self
        f = probe_s / self.reference_probe_s
        times = (lambda v: None if v is None else v * f)  # noqa: E731
        return HostCosts(self.forward_call_s * f, self.backward_call_s * f, self.view_call_s * f,
                         self.graph_launch_s * f, probe_s, self.class_extra, times(self.compile_graph_s),
                         times(self.compile_kernel_s), times(self.compile_extern_s), self.compile_source,
                         times(self.graph_input_s), self.graph_input_source)


@dataclass(frozen=True)
class TimingModel:
    chip: str
    status: str  # measured | assumed | unverified
    source: str
    classes: dict[str, ClassRates]
    host: HostCosts
    kernel_gap_s: float = 0.0  # between back-to-back kernels on the device (not in a profile's per-op kernel time)
    # compile mode: what a compiled attention forward writes out for its library kernel (npuport.cost.fused)
    compile_attention: frozenset[str] = frozenset()
    # compile mode: a causal attention given its bias written out runs the masked kernel, this many times the causal
    # one's time (it no longer skips the masked half, and the masked path is slower besides)
    compile_masked_attention: tuple[float, float] = (2.0, 2.0)  # (forward, backward)

    def rates(self, cls: str) -> ClassRates:
        return self.classes.get(cls) or self.classes["elementwise"]


@dataclass(frozen=True)
class StepTime:
    """One simulated step: host busy time, device busy time, the step's wall time, the device's idle part of it."""

    mode: Mode
    host_s: float
    device_s: float
    step_s: float
    syncs: int
    kernels: int = 0  # compile mode: the kernels the compiled step launches (fused runs and extern calls)
    graph_calls: int = 0  # compile mode: calls of compiled graphs per step (forward, backward, one more per sync)
    # graph and compile modes: (timing class or "generated", kernels, device seconds) of the step's kernels, what a
    # measured profile's kernel classes are held against (npuport.profile.kernel_classes)
    classes: tuple[tuple[str, int, float], ...] = ()

    @property
    def idle_s(self) -> float:
        return max(self.step_s - self.device_s, 0.0)

    @property
    def bound(self) -> str:
        return "host" if self.host_s > self.device_s else "device"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "step_s": self.step_s, "host_s": self.host_s, "device_s": self.device_s,
               "idle_s": self.idle_s, "bound": self.bound, "syncs": self.syncs}
        if is_compiled(self.mode):
            out |= {"kernels": self.kernels, "graph_calls": self.graph_calls}
        if self.classes:
            out["timing_classes"] = {c: {"kernels": n, "device_s": t} for c, n, t in self.classes}
        return out


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return load_checked(_FILE)  # schemas/timing.schema.json


@functools.lru_cache(maxsize=1)
def class_of_op() -> dict[str, str]:
    out: dict[str, str] = {}
    for cls, ops in _data()["classes"].items():
        for op in ops:
            out[op] = cls
    return out


@functools.lru_cache(maxsize=1)
def strided_classes() -> frozenset[str]:
    return frozenset(_data()["strided_classes"])


def is_strided(shape: tuple[int, ...], stride: tuple[int, ...] | None) -> bool:
    """A view whose elements are not dense in row-major order once broadcast (stride 0) and size-1 dims are set
    aside: a transposed or sliced tensor, whose kernels read memory with gaps."""
    if stride is None:
        return False
    dims = [(n, st) for n, st in zip(shape, stride) if n != 1 and st != 0]
    expect = 1
    for n, st in reversed(dims):
        if st != expect:
            return True
        expect *= n
    return False


def is_broadcast(stride: tuple[int, ...] | None, shape: tuple[int, ...]) -> bool:
    """An operand expanded along a dim (stride 0 over more than one element)."""
    return stride is not None and any(st == 0 and n > 1 for n, st in zip(shape, stride))


# Below this many contiguous elements under its innermost broadcast dim, an operand broadcast by the op itself
# makes the kernel run at the "broadcast" rates: the calibration's column ([R, 1]) and row ([C], C <= 4096)
# multiplies. Its broadcasts over heads ([1, 1, S, D] against [1, H, S, D], blocks of 65536 and more) run at
# plain elementwise rates (scripts/calibrate_timing.py, docs/measured/h200-calibration.json).
_BROADCAST_BLOCK = 16384


def is_implicit_broadcast(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """An operand of more than one element that the op itself broadcasts to its output's shape (x * rsqrt(var) of
    a norm: [S, 1] against [S, H]), with short contiguous blocks under the broadcast dim."""
    if len(shape) > len(out) or _numel(shape) <= 1:
        return False
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    for i in range(len(out) - 1, -1, -1):
        if padded[i] == 1 and out[i] > 1:
            return _numel(out[i + 1:]) < _BROADCAST_BLOCK
    return False


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class SyncWhen:
    """An op that reads the device only in some overloads, or only with some arguments (timing.yaml sync_ops.when)."""

    overloads: frozenset[str]  # "default" for the overload without a name (aten::where)
    unless_given: str | None = None  # a keyword argument that, passed, tells the kernel its output size
    tensor_arg: int | None = None  # with `dtypes`: the positional argument (a tensor or a list of them) that decides
    dtypes: frozenset[str] = frozenset()


class SyncCall(Protocol):
    """What is_sync reads of a call (npuport.cost.inventory.ReportedCall and npuport.cost.fused.Call have it)."""

    @property
    def op(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def args(self) -> tuple: ...
    @property
    def kwargs(self) -> dict: ...
    @property
    def inputs(self) -> tuple[TensorMeta, ...]: ...


@functools.lru_cache(maxsize=1)
def _sync_table() -> tuple[frozenset[str], dict[str, SyncWhen]]:
    raw = _data()["sync_ops"]
    when = {}
    for name, w in (raw.get("when") or {}).items():
        dt = w.get("tensor_dtypes") or {}
        when[name] = SyncWhen(frozenset(w["overloads"]), w.get("unless_given"), dt.get("arg"), frozenset(dt.get("dtypes", ())))
    always = frozenset(raw["ops"])
    if always & when.keys():  # one op, two answers: the unconditional list would silently win
        raise MappingError(_FILE, "sync_ops", "when", f"{', '.join(sorted(always & when.keys()))} also listed under "
                           "ops (every overload syncs): list an op in one place")
    return always, when


def sync_ops() -> frozenset[str]:
    """Base names of the ops that sync in every overload; is_sync also knows the ones that sync only in some."""
    return _sync_table()[0]


@functools.lru_cache(maxsize=1)
def joined_read_ops() -> frozenset[str]:
    """Scalar reads that one torch-level call issues per element (timing.yaml sync_ops.joined_reads: FakeTensor's
    .tolist() is one .item() per element, a device tensor's one copy to the host)."""
    return frozenset((_data()["sync_ops"].get("joined_reads") or {}).get("ops", ()))


@functools.lru_cache(maxsize=None)
def _sync_rule(op: str) -> SyncWhen | bool:
    """True: `op` ('aten::nonzero', 'aten::repeat_interleave.self_int') always syncs; False: never; else its rule."""
    base, _, overload = op.split("::", 1)[-1].partition(".")
    always, when = _sync_table()
    rule = when.get(base)
    if rule is None:
        return base in always
    return rule if (overload or "default") in rule.overloads else False


def is_sync(call: SyncCall) -> bool:
    """Whether the host waits for the device at this call (a value or an output size read back): an op of
    timing.yaml's sync_ops.ops, or a `when` entry's overload in a forward call whose arguments leave the kernel
    to read one (repeat_interleave with a repeats tensor and no output_size, x[mask] with a bool mask). A scalar read
    that joins the one before it (`joined_read`, set by npuport.cost.inventory.mark_joined_reads: the next element of
    one `.tolist()`) waits for nothing that read did not: no sync of its own."""
    if getattr(call, "joined_read", False):  # not in SyncCall: only a reported call knows its neighbours
        return False
    rule = _sync_rule(call.op)
    if isinstance(rule, bool):
        return rule
    if call.phase != "forward":  # a native composite's backward, reported under the forward's name
        return False
    if rule.unless_given is not None and call.kwargs.get(rule.unless_given) is not None:
        return False
    if rule.tensor_arg is not None:
        given = call.args[rule.tensor_arg] if rule.tensor_arg < len(call.args) else None
        refs = given if isinstance(given, (list, tuple)) else (given,)
        return any(isinstance(r, TensorRef) and call.inputs[r.index].dtype in rule.dtypes for r in refs)
    return True


def inductor_fallback_ops() -> frozenset[str]:
    """Ops of a fusible class that torch.compile still runs as ATen kernels (mappings/timing.yaml)."""
    return frozenset(_data().get("inductor_fallback", {}).get("ops", ()))


def op_class(base: str, kind: str = "compute") -> str:
    """'mm' -> 'matmul'; a view op -> 'view'; an op listed nowhere -> 'elementwise'."""
    if kind == "view":
        return "view"
    return class_of_op().get(base, "elementwise")


def _model(name: str, raw: dict[str, Any], status: str, source: str) -> TimingModel:
    classes = {c: ClassRates(float(v["compute"]), float(v["memory"]), float(v["fixed_s"])) for c, v in raw["classes"].items()}
    if "elementwise" not in classes:
        raise MappingError(_FILE, name, "classes", "needs an elementwise entry (the class of unlisted ops)")
    h = raw["host"]
    opt = (lambda k: None if h.get(k) is None else float(h[k]))  # noqa: E731
    return TimingModel(name, status, source, classes,
                       HostCosts(float(h["forward_call_s"]), float(h["backward_call_s"]), float(h["view_call_s"]),
                                 float(h["graph_launch_s"]), h.get("reference_probe_s"),
                                 tuple(sorted((k, float(v)) for k, v in (h.get("class_extra") or {}).items())),
                                 opt("compile_graph_s"), opt("compile_kernel_s"), opt("compile_extern_s"),
                                 str(h.get("compile_source") or ""), opt("graph_input_s"),
                                 str(h.get("graph_input_source") or "")),
                       float(raw.get("kernel_gap_s", 0.0)), frozenset(raw.get("compile_attention") or ()),
                       _masked(raw.get("compile_masked_attention")))


def _masked(raw: dict[str, Any] | None) -> tuple[float, float]:
    """(forward, backward) factors of a masked attention over its causal time; 2 (the masked half no longer
    skipped) where timing.yaml measured none."""
    return (float(raw["forward"]), float(raw["backward"])) if raw else (2.0, 2.0)


# family -> the host probe (seconds per tiny eager op) the user's own host reads, while `host_probe` is in force
_HOST_PROBE: dict[str, float] = {}


@contextlib.contextmanager
def host_probe(probes: Mapping[str, float]) -> Iterator[None]:
    """Within: the chips of these families take their host costs scaled to a host whose probe reads the given seconds
    per tiny eager op (`HostCosts.scaled`: the costs hold for the host they were fit on, `reference_probe_s`). Every
    consumer of `timing_for` sees the same scaled model, so the audit's step times, graph-mode advice and profile
    joins agree."""
    old = dict(_HOST_PROBE)
    _HOST_PROBE.clear()
    _HOST_PROBE.update(probes)
    try:
        yield
    finally:
        _HOST_PROBE.clear()
        _HOST_PROBE.update(old)


def timing_for(chip: ChipProfile) -> TimingModel:
    """The chip's own entry, else its family's (marked with that entry's status: assumed / unverified); with its
    host costs scaled where `host_probe` gives its family's host speed."""
    probe = _HOST_PROBE.get(chip.family)
    return _timing(chip.name, chip.family) if probe is None else _scaled_timing(chip.name, chip.family, probe)


def reference_probe_s(chip: ChipProfile) -> float | None:
    """The host probe the chip's host costs were fit at, whatever `host_probe` is in force."""
    return _timing(chip.name, chip.family).host.reference_probe_s


@functools.lru_cache(maxsize=None)
def _scaled_timing(name: str, family: str, probe_s: float) -> TimingModel:
    model = _timing(name, family)
    return replace(model, host=model.host.scaled(probe_s))


@functools.lru_cache(maxsize=None)
def _timing(name: str, family: str) -> TimingModel:
    data = _data()
    if name in data["chips"]:
        raw = data["chips"][name]
        return _model(name, raw, raw["status"], raw["source"])
    fam = data["families"].get(family)
    if fam is None:
        raise MappingError(_FILE, "families", family, f"no timing for chip family {family!r} ({name})")
    if "like" in fam:
        if fam["like"] not in data["chips"]:
            raise MappingError(_FILE, f"families.{family}", "like", f"{fam['like']!r} is not under chips")
        base = data["chips"][fam["like"]]
        return _model(name, {"classes": base["classes"], "host": fam.get("host", base["host"]),
                             "kernel_gap_s": base.get("kernel_gap_s", 0.0),
                             "compile_attention": base.get("compile_attention"),
                             "compile_masked_attention": base.get("compile_masked_attention")},
                      fam["status"], fam["source"])
    return _model(name, fam, fam["status"], fam["source"])


INDEXED_STORES = frozenset({"index_put", "index_put_", "_index_put_impl", "_index_put_impl_"})
# PyTorch's CUDA sort keeps a sorted dim of at most this many elements in one in-place kernel and hands a longer
# one to a segmented radix sort (several kernels, a fixed cost of tens of microseconds): aten/src/ATen/native/cuda/
# Sort.h, should_use_small_sort (size(dim) <= 4096); topk sorts its result the same way
SMALL_SORT_MAX = 4096


def op_variant(base: str, cls: str, input_ranks: tuple[int, ...], accumulate: bool | None, model: TimingModel | None,
               backward: bool = False, repeats: bool = True, sort_len: int | None = None,
               reduces_inner: bool = True) -> str:
    """The class variant timing.yaml times an op's kernel with, where the chip's model has it: a grouped GEMM grouped
    along K (a weight gradient, 2-D x 2-D) runs another kernel than the forward's; attention's backward (dQ, dK, dV
    from a recomputed score matrix) other kernels than its forward; an indexed store with accumulate sorts its
    indices first, and where there are more indices than rows (`repeats`: some row is hit several times) it adds the
    repeats serially; one without accumulate is a plain store; a sort along a dim longer than SMALL_SORT_MAX
    (`sort_len`) is a radix sort; a reduction along a dim that is not the innermost (`reduces_inner` False: an MoE
    summing its top-k outputs, [T, k, H] over k) runs another kernel configuration (scripts/calibrate_timing.py
    measures each)."""
    want = None
    if cls == "sort" and sort_len is not None and sort_len > SMALL_SORT_MAX:
        want = "sort_radix"
    elif cls == "reduction" and not reduces_inner and not backward:
        want = "reduction_outer"
    elif cls == "grouped_matmul" and input_ranks[:2] == (2, 2):
        want = "grouped_matmul_wgrad"
    elif cls == "attention" and backward:
        want = "attention_backward"
    elif base in INDEXED_STORES and accumulate is not None:
        want = ("scatter_store" if not accumulate else "scatter_accumulate" if repeats
                else "scatter_accumulate_unique")
    if model is None:  # the variant wanted, whichever chip's model has it
        return want if want is not None else cls
    return want if want is not None and want in model.classes else cls


def call_device_s(model: TimingModel, chip: ChipProfile, cls: str, flops: float, nbytes: float, dtype: str,
                  matrix: bool, strided: bool = False, broadcast: bool = False, widening: bool = False) -> float:
    """Device seconds of one call of class `cls` (0 for a view). The layout of its operands picks a variant of the
    class where timing.yaml has one: `strided` (an input is a strided view), `broadcast` (an elementwise op with an
    operand broadcast along a dim), `widening` (a cast to a wider dtype)."""
    if cls == "view":
        return 0.0
    if strided and cls in strided_classes():
        cls = next((c for c in (f"strided_{cls}", "strided") if c in model.classes), cls)
    elif broadcast and cls in ("elementwise", "copy"):  # a copy from an expanded source is the same kernel
        half = dtype in ("bfloat16", "float16") and "broadcast_half" in model.classes
        cls = "broadcast_half" if half else "broadcast" if "broadcast" in model.classes else cls
    elif widening and cls == "cast" and "cast_widen" in model.classes:
        cls = "cast_widen"
    r = model.rates(cls)
    compute = flops / (chip.peak_flops(dtype, matrix) * r.compute) if flops else 0.0
    memory = nbytes / (chip.memory_bandwidth * r.memory) if nbytes else 0.0
    return max(compute, memory) + r.fixed_s


@dataclass(frozen=True)
class Issued:
    """What the simulation needs of one call: its device time, whether it is a view, its phase, whether it syncs."""

    device_s: float
    view: bool
    backward: bool
    sync: bool
    host_extra_s: float = 0.0  # the host's cost for this call's class beyond the per-call cost (HostCosts.extra_s)
    # compile mode: "generated" (a fused kernel), "extern" (a library kernel) or "sync" (a value read back between
    # graphs: no launch); reduce-overhead: "input" (an input's copy into its graph, host_extra_s its host cost); eager: ""
    launch: str = ""
    cls: str = ""  # the kernel's timing class ("generated" for an Inductor kernel): StepTime.classes


def simulate(model: TimingModel, calls: Iterable[Issued], mode: Mode = "eager") -> StepTime:
    h = model.host
    gap = model.kernel_gap_s
    if mode == "graph":
        kernels = [c.device_s for c in calls if c.device_s > 0]
        device = sum(kernels)
        return StepTime(mode, h.graph_launch_s, device, h.graph_launch_s + device + gap * len(kernels), 0)
    if is_compiled(mode):
        return _simulate_compiled(model, calls, graphed=mode == "reduce-overhead")
    host_t = dev_t = host_busy = dev_busy = 0.0
    syncs = 0
    for c in calls:
        cost = h.view_call_s if c.view else (h.backward_call_s if c.backward else h.forward_call_s) + c.host_extra_s
        host_t += cost
        host_busy += cost
        if c.device_s > 0:
            dev_t = max(dev_t + gap, host_t) + c.device_s
            dev_busy += c.device_s
        if c.sync:
            host_t = max(host_t, dev_t)
            syncs += 1
    return StepTime(mode, host_busy, dev_busy, max(host_t, dev_t), syncs)


def kernels_by_class(calls: Iterable[Issued]) -> tuple[tuple[str, int, float], ...]:
    """The issued kernels (device time above 0) per class, costliest class first."""
    acc: dict[str, list[Any]] = {}
    for c in calls:
        if c.device_s > 0 and not c.view:
            row = acc.setdefault(c.cls or "elementwise", [0, 0.0])
            row[0] += 1
            row[1] += c.device_s
    return tuple(sorted(((k, n, t) for k, (n, t) in acc.items()), key=lambda x: (-x[2], x[0])))


def has_compile_costs(model: TimingModel) -> bool:
    h = model.host
    return None not in (h.compile_graph_s, h.compile_kernel_s, h.compile_extern_s)


def _simulate_compiled(model: TimingModel, calls: Iterable[Issued], graphed: bool = False) -> StepTime:
    """A compiled step: its kernels (npuport.cost.fused) launched one by one by the graph's wrapper, a graph call's
    own cost where a graph begins (the step's start, the backward's, after each sync: a graph break).
    graphed (torch.compile mode="reduce-overhead"): each compiled graph is replayed as one device graph (CUDA graph
    trees; aclgraph on the NPU), so a graph call costs the host its call (guards, wrapper) and one replay launch, and
    its kernels cost the host nothing each."""
    h = model.host
    if not has_compile_costs(model):
        raise MappingError(_FILE, model.chip, "host", "no torch.compile host costs (compile_graph_s, compile_kernel_s, "
                           "compile_extern_s) for this chip")
    graph_s, kernel_s, extern_s = float(h.compile_graph_s or 0), float(h.compile_kernel_s or 0), float(h.compile_extern_s or 0)
    if graphed:
        graph_s, kernel_s, extern_s = graph_s + h.graph_launch_s, 0.0, 0.0
    gap = model.kernel_gap_s
    host_t = dev_t = host_busy = dev_busy = 0.0
    syncs = kernels = graph_calls = 0
    phase: bool | None = None
    new_graph = True
    for c in calls:
        if new_graph or c.backward != phase:
            host_t += graph_s
            host_busy += graph_s
            graph_calls += 1
            new_graph = False
        phase = c.backward
        if c.launch == "input":  # reduce-overhead: an input copied into its graph before the replay
            cost = c.host_extra_s
        elif c.launch == "sync":  # a value read back between graphs: the wait below, no launch
            cost = 0.0
        else:
            cost = (kernel_s if c.launch == "generated" else extern_s) + (0.0 if graphed else c.host_extra_s)
        host_t += cost
        host_busy += cost
        if c.device_s > 0:
            dev_t = max(dev_t + gap, host_t) + c.device_s
            dev_busy += c.device_s
            kernels += 1
        if c.sync:
            host_t = max(host_t, dev_t)
            syncs += 1
            new_graph = True
    return StepTime("reduce-overhead" if graphed else "compile", host_busy, dev_busy, max(host_t, dev_t), syncs, kernels, graph_calls)
