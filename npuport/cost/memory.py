"""Device memory per scenario, from what the traced step measured (npuport.trace.memory) plus what no trace of the
step shows (the optimizer's state and step, master weights, the runtime's reserve, from mappings/), and whether it
fits each chip, with the smallest changes that make it fit when it does not.

Train step model (bytes): W weights, G gradients, S optimizer states, T the optimizer step's temporary, P the
traced forward + backward peak, A what is alive when backward returns (W + G + the outputs the caller holds).
  step 0 peak = max(P, A + S + T)        (states are allocated at the first step)
  step 1 peak = max(P + S, A + S + T)    (from then on they are alive through forward and backward)
  held between steps = W + S             (zero_grad sets gradients to None, torch's default since 2.0)

One rank of a job whose expert or pipeline parallel is estimated, not traced (the traced rank holds every expert and
every layer): a RankShare says what a rank of the job holds of the traced rank's parameters and cache, and the
figures are that rank's (scenario_memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from npuport.cost.roofline import load_chips
from npuport.errors import NpuportError
from npuport.mappings import load_checked

if TYPE_CHECKING:  # only for annotations: the CLI reads the optimizer names without loading torch
    import torch

_FILE = "memory.yaml"
_HW = "hardware.yaml"
GiB = 1 << 30


@dataclass(frozen=True)
class Capacity:
    chip: str
    capacity: int | None
    reserve: int
    assumed: bool

    @property
    def usable(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.reserve


def capacities() -> list[Capacity]:
    """Every chip of hardware.yaml with its memory, and each sized variant as a chip of its own."""
    load_chips()
    out = []
    for name, raw in load_checked(_HW)["chips"].items():
        mem = raw.get("memory") or {}
        reserve = int(mem.get("reserve_bytes", 0))
        assumed = mem.get("reserve_confidence") == "assumed"
        out.append(Capacity(name, mem.get("capacity_bytes"), reserve, assumed))
        for variant, cap in (mem.get("variants") or {}).items():
            out.append(Capacity(variant, int(cap), reserve, assumed))
    return out


def optimizer_names() -> list[str]:
    return list(load_checked(_FILE)["optimizers"])


def default_optimizer() -> str:
    return str(load_checked(_FILE)["default_optimizer"])


@dataclass
class OptimizerMemory:
    name: str
    states: int
    step_temporary: int
    master_weights: int


def optimizer_memory(params: Sequence[torch.Tensor], name: str, master_weights: bool) -> OptimizerMemory:
    """State and step temporary of optimizer `name` for these (trainable) parameters; with master weights, the
    float32 copy and float32 states a mixed-precision run keeps."""
    data = load_checked(_FILE)
    if name not in data["optimizers"]:
        raise NpuportError(f"unknown optimizer {name!r}", "one of " + ", ".join(data["optimizers"]), name)
    opt = data["optimizers"][name]
    states = temp = master = 0
    for p in params:
        n, size = p.numel(), p.element_size()
        state_size = 4 if master_weights else size
        if opt.get("factored") and p.dim() >= 2:
            states += (p.shape[-2] + p.shape[-1]) * 4 * (n // (p.shape[-2] * p.shape[-1]))
        elif opt.get("factored"):
            states += n * 4
        elif "state_bytes" in opt:
            states += opt["states"] * (n * opt["state_bytes"] + 4 * -(-n // opt["block"]))
        else:
            states += opt["states"] * n * state_size
        temp += int(opt["step_temporary"] * n * state_size)
        if master_weights:
            master += n * data["master_weights"]["bytes_per_parameter"]
    return OptimizerMemory(name, states, temp, master)


@dataclass(frozen=True)
class RankShare:
    """What a rank of the job holds of what the traced rank holds, where the layout is estimated (npuport.audit.
    memory_stage fills it). `params`: of its parameters, and so of their gradients, optimizer states and master
    weights ((dense + routed experts / ep) / pp); `cache`: of an inference step's inputs (a decode step's KV cache:
    its pipeline stage's layers only). `experts`: the routed experts per MoE layer a rank holds, `experts_share`
    their share of its parameter bytes, `tp_splits_experts` whether the model's tensor-parallel plan splits them
    (transformers' plans do not: its expert-parallel plan does); the planner's tensor-parallel advice needs them."""

    params: float = 1.0
    cache: float = 1.0
    experts: int = 0
    experts_share: float = 0.0
    tp_splits_experts: bool = False


@dataclass
class ScenarioMemory:
    """One scenario's memory, in bytes; `peak` is the number a chip must hold."""

    kind: str
    weights: int
    inputs: int
    traced_peak: int
    peak_phase: str
    peak_module: str
    activations: int = 0
    grads: int = 0
    optimizer: OptimizerMemory | None = None
    step0_peak: int = 0
    peak: int = 0
    held: int = 0
    activations_by_module: dict[str, int] = field(default_factory=dict)
    graph_inputs: int = 0  # reduce-overhead: the graphs' own copy of the step's non-parameter inputs (graph_inputs)
    share: RankShare = field(default_factory=RankShare)  # per rank of a job with estimated ep / pp (1.0: as traced)
    fit: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"peak_bytes": self.peak, "weights_bytes": self.weights, "inputs_bytes": self.inputs,
                               "traced_peak_bytes": self.traced_peak, "traced_peak_phase": self.peak_phase,
                               "traced_peak_module": self.peak_module, "held_bytes": self.held}
        if self.kind == "train":
            opt = self.optimizer
            out.update({"activations_bytes": self.activations, "grads_bytes": self.grads,
                        "optimizer": opt.name if opt else None,
                        "optimizer_states_bytes": opt.states if opt else 0,
                        "optimizer_step_temporary_bytes": opt.step_temporary if opt else 0,
                        "master_weights_bytes": opt.master_weights if opt else 0,
                        "step0_peak_bytes": self.step0_peak,
                        "activations_by_module": dict(list(self.activations_by_module.items())[:12])})
        if self.graph_inputs:
            out["graph_inputs_bytes"] = self.graph_inputs
        if self.share.params != 1.0 or self.share.cache != 1.0:
            out["held_share"] = {"params": self.share.params, "cache": self.share.cache}
        out["fit"] = self.fit
        out["changes"] = self.changes
        return out


def graph_inputs(m: ScenarioMemory, copied: int) -> None:
    """torch.compile(mode="reduce-overhead"): CUDA graph trees give each graph its own buffer for every input that is
    not a parameter, a buffer or marked static, and copy the input into it before each replay
    (torch/_inductor/cudagraph_trees.py: the static inputs allocated when a graph is recorded,
    `_copy_inputs_and_remove_from_src`), so those `copied` bytes of the step's inputs (a decode step's KV cache) are
    held twice while the graph lives."""
    m.graph_inputs = copied
    m.peak += copied
    m.step0_peak += copied
    m.held += copied


def _merged(by_module: dict[str, int]) -> dict[str, int]:
    """The innermost modules (a parent's bytes are its children's), layer indices merged
    (model.layers.3.mlp -> model.layers.*.mlp), largest first."""
    out: dict[str, int] = {}
    # every proper prefix of every path: a path among them has children (was a scan of all paths per path: quadratic
    # in the modules, 1.3 M string tests for Llama-2-70B)
    parents = {path[:i] for path in by_module for i, ch in enumerate(path) if ch == "."}
    for path, n in by_module.items():
        if path in parents:
            continue
        key = ".".join("*" if part.isdigit() else part for part in path.split("."))
        out[key] = out.get(key, 0) + n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def scenario_memory(kind: str, trace: Any, params: Sequence[torch.Tensor], optimizer: str, master_weights: bool,
                    share: RankShare | None = None) -> ScenarioMemory:
    """The scenario's memory from its MemoryTrace (npuport.trace.memory) and, for training, the optimizer model; with
    `share`, a rank of the job's: (1 - params) of the parameter bytes `params` hold off the weights, the held bytes,
    what is alive after the step and the traced peak; gradients, optimizer states, step temporary and master weights
    scaled by `params`; an inference step's inputs (its cache) by `cache`. Activations stay as traced: an expert rank
    runs as many (token, expert) pairs as the trace (tokens x top-k, arriving from the other ranks), and the first
    stage of a 1F1B pipeline keeps pp micro-batches of its 1/pp of the layers, about one micro-batch of every layer.
    The traced peak keeps whole the gradients alive at it (the trace does not say how many are): an overstatement
    of at most (1 - params) x the gradients, none when the peak is in forward."""
    share = share or RankShare()
    cut_w = round((1 - share.params) * sum(p.numel() * p.element_size() for p in params))
    m = ScenarioMemory(kind, trace.weights - cut_w, trace.inputs, trace.peak - cut_w, trace.peak_phase,
                       trace.peak_module, share=share)
    if kind != "train":
        cut_c = round((1 - share.cache) * trace.inputs)
        m.inputs -= cut_c
        m.traced_peak -= cut_c
        m.peak = m.step0_peak = m.traced_peak
        m.held = m.weights + m.inputs
        return m
    full = optimizer_memory([p for p in params if p.requires_grad], optimizer, master_weights)
    opt = OptimizerMemory(full.name, round(full.states * share.params), round(full.step_temporary * share.params),
                          round(full.master_weights * share.params))
    states = opt.states + opt.master_weights
    m.optimizer, m.grads, m.activations = opt, round(trace.grads * share.params), trace.saved
    m.activations_by_module = _merged(trace.saved_by_module)
    after = trace.after - cut_w - (trace.grads - m.grads)  # every gradient is alive when the step returns
    step = after + states + opt.step_temporary
    m.step0_peak = max(m.traced_peak, step)
    m.peak = max(m.traced_peak + states, step)
    m.held = m.weights + states
    return m


def judge(m: ScenarioMemory) -> None:
    """Fill `fit`: per chip, the usable memory and the verdict ("fits with X free" / "over by Y")."""
    m.fit = []
    for c in capacities():
        row: dict[str, Any] = {"chip": c.chip, "capacity_bytes": c.capacity, "reserve_bytes": c.reserve,
                               "reserve_assumed": c.assumed, "usable_bytes": c.usable}
        if c.usable is None:
            row.update({"fits": None, "margin_bytes": None, "verdict": "capacity unknown"})
        else:
            margin = c.usable - m.peak
            row.update({"fits": margin >= 0, "margin_bytes": margin,
                        "verdict": f"fits with {margin / GiB:.1f} GiB free" if margin >= 0 else f"over by {-margin / GiB:.1f} GiB"})
        m.fit.append(row)


_DEVICES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # device counts tried for models no smaller change fits


def plan(m: ScenarioMemory, usable: int, step_time_s: float, layers: int, sc: Any) -> None:
    """When the scenario is over `usable` bytes: the smallest changes that make it fit, each with its memory and
    its cost in step time on the roofline (communication is left to the scale-out view)."""
    m.changes = []
    if m.peak <= usable:
        return
    _plan(m, usable, step_time_s, layers, sc)
    for c in m.changes:
        c["fits"] = c["peak_bytes"] <= usable


def _plan(m: ScenarioMemory, usable: int, step_time_s: float, layers: int, sc: Any) -> None:
    if m.kind == "train":
        opt = m.optimizer
        states = (opt.states + opt.master_weights) if opt else 0
        temp = opt.step_temporary if opt else 0
        act = max(m.traced_peak - m.weights - m.inputs - m.grads, 0)
        for k in (2, 4, 8, 16, 32):
            if sc.batch % k:
                continue
            peak = max(m.weights + m.inputs + m.grads + act // k + states, m.weights + m.grads + states + temp)
            if peak <= usable:
                m.changes.append({"change": f"micro-batch {sc.batch // k} with {k} gradient-accumulation steps",
                                  "peak_bytes": peak, "extra_time_s": 0.0,
                                  "note": "same FLOPs per sample; activations scale with the micro-batch"})
                break
        # full recomputation keeps each layer's input (about 2 of the ~34 bytes per token and hidden unit a layer
        # keeps: Korthikanti et al., arXiv:2205.05198) and runs the forward again in backward (+1/3 of the step)
        if layers:
            for k in (1, 2, 4, 8, 16, 32):
                if sc.batch % k:
                    continue
                peak = max(m.weights + m.inputs + m.grads + act * 2 // 34 // k + states, m.weights + m.grads + states + temp)
                if peak <= usable or k == 1:
                    what = "full activation recomputation (gradient checkpointing of every layer)"
                    if k > 1:
                        what += f" with micro-batch {sc.batch // k} and {k} gradient-accumulation steps"
                    m.changes.append({"change": what, "peak_bytes": peak, "extra_time_s": step_time_s / 3,
                                      "note": "keeps each layer's input, recomputes the forward in backward"})
                if peak <= usable:
                    break
        for stage, shard in (("ZeRO-1 (optimizer states)", "s"), ("ZeRO-2 (states + gradients)", "sg"),
                             ("ZeRO-3 / FSDP (states + gradients + weights)", "sgw")):
            for n in (2, 4, 8, 16, 32, 64):
                s = states // n if "s" in shard else states
                g = m.grads // n if "g" in shard else m.grads
                w = m.weights // n if "w" in shard else m.weights
                peak = max(m.traced_peak - m.weights - m.grads + w + g + s, w + g + s + temp // n)
                if peak <= usable:
                    m.changes.append({"change": f"{stage} across {n} devices", "peak_bytes": peak, "extra_time_s": 0.0,
                                      "note": "communication per step: see the scale-out view"})
                    break
        if layers and not any(c["peak_bytes"] <= usable for c in m.changes):
            kept = act * 2 // 34  # activations under full recomputation
            for n in (2, 4, 8, 16, 32, 64):
                peak = max(m.weights + m.inputs + (m.grads + states) // n + kept, m.weights + (m.grads + states + temp) // n)
                if peak <= usable:
                    m.changes.append({"change": f"full activation recomputation with ZeRO-2 across {n} devices",
                                      "peak_bytes": peak, "extra_time_s": step_time_s / 3,
                                      "note": "states and gradients sharded; communication per step: see the scale-out view"})
                    break
        experts = _experts_bytes(m, m.weights + m.grads + states)
        whole = 0 if m.share.tp_splits_experts else experts
        for t in (2, 4, 8):
            peak = whole + (m.peak - whole) // t
            if peak <= usable:
                m.changes.append({"change": f"tensor parallel degree {t} (with sequence parallel)", "peak_bytes": peak,
                                  "extra_time_s": 0.0, "note": f"weights, gradients, states and activations split {t} ways"
                                  + _experts_whole(whole)})
                break
        _expert_parallel(m, usable, experts, "weights, gradients and states")
        if layers and not any(c["peak_bytes"] <= usable for c in m.changes):
            # a model no single change fits (hundreds of billions of parameters): every held byte sharded, the
            # activations recomputed; the fewest devices that hold it, a bound a real layout (tensor, pipeline,
            # expert parallel) approaches
            kept = act * 2 // 34
            found = next(((n, k, peak) for n in _DEVICES for k in (1, 2, 4, 8, 16, 32) if sc.batch % k == 0
                          for peak in [max(m.inputs + kept // k + (m.weights + m.grads + states) // n,
                                           (m.weights + m.grads + states + temp) // n)] if peak <= usable), None)
            if found is not None:
                n, k, peak = found
                what = f"full activation recomputation with ZeRO-3 / FSDP across {n} devices"
                if k > 1:
                    what += f", micro-batch {sc.batch // k} with {k} gradient-accumulation steps"
                m.changes.append({"change": what, "peak_bytes": peak, "extra_time_s": step_time_s / 3,
                                  "note": f"weights, gradients and states sharded {n} ways, each layer's input kept; past "
                                          "one 8-device node: communication per step: see the scale-out view"})
    else:
        cache = m.inputs
        transient = max(m.traced_peak - m.weights - m.inputs, 0)
        per_seq = cache // max(sc.batch, 1)
        room = usable - m.weights - transient
        if per_seq and room > 0:
            m.changes.append({"change": f"serve at most {room // per_seq} sequences of {sc.past + sc.seq} tokens "
                                        f"(KV cache {per_seq / GiB:.2f} GiB each)",
                              "peak_bytes": m.weights + transient + (room // per_seq) * per_seq, "extra_time_s": 0.0,
                              "note": "an 8-bit KV cache halves the cache of a 16-bit model"})
        experts = _experts_bytes(m, m.weights)
        whole = 0 if m.share.tp_splits_experts else experts
        split = next(((t, peak) for t in (2, 4, 8) for peak in [whole + (m.peak - whole) // t] if peak <= usable), None)
        if split is not None:
            m.changes.append({"change": f"tensor parallel degree {split[0]}", "peak_bytes": split[1], "extra_time_s": 0.0,
                              "note": f"weights and cache split {split[0]} ways" + _experts_whole(whole)})
        spread = _expert_parallel(m, usable, experts, "weights")
        if split is None and not spread:
            # more than one 8-device node holds it: the fewest devices, every byte split evenly
            for n in _DEVICES[4:]:
                if m.peak // n <= usable:
                    m.changes.append({"change": f"weights and cache split across {n} devices", "peak_bytes": m.peak // n,
                                      "extra_time_s": 0.0,
                                      "note": "more than one 8-device node: tensor parallel within a node, pipeline or "
                                              "expert parallel across nodes; an even split is the bound a layout approaches"})
                    break


def _experts_bytes(m: ScenarioMemory, of: int) -> int:
    """The routed experts' part of `of` (a rank's parameter bytes, or those with their gradients and states)."""
    return round(m.share.experts_share * of)


def _experts_whole(whole: int) -> str:
    return (f"; the routed experts ({whole / GiB:.1f} GiB of them) stay whole on every rank: the model's "
            "tensor-parallel plan does not split them (expert parallel does)") if whole else ""


def _expert_parallel(m: ScenarioMemory, usable: int, experts: int, what: str) -> bool:
    """Mixture of experts: the fewest expert-parallel ranks (a degree that divides the experts a rank holds) that
    fit, the routed experts' `what` split over them, the rest replicated. True when one is added."""
    for e in (2, 4, 8, 16, 32, 64):
        if not experts or m.share.experts % e:
            continue
        peak = m.peak - experts + experts // e
        if peak <= usable:
            m.changes.append({"change": f"expert parallel degree {e}", "peak_bytes": peak, "extra_time_s": 0.0,
                              "note": f"the routed experts' {what} split {e} ways, the rest replicated; an all-to-all "
                                      "per MoE layer: see the scale-out view"})
            return True
    return False
