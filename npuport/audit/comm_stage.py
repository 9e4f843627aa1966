"""Audit stage: the communication of one rank of a distributed job, per scenario.

In: the collectives each trace recorded (npuport.trace.collectives: kind, nccl-tests bytes, group, module, line,
phase), the layout (npuport.model.distributed), the step the cost stage estimated. Out: the collectives grouped as
the report lists them, each with its time on the target and on the CUDA baseline (npuport.cost.comm over
mappings/links.yaml), its HCCL support on the chosen torch_npu release (npuport.coverage.hccl), whether it can
overlap compute (mappings/scale_out.yaml), and per scenario the compute / communication split: exposed time, time
that can hide behind compute, and the step with both.

What --parallel cannot trace is estimated here and marked `estimated`: DDP's gradient all-reduce (no ZeRO), the
expert all-to-alls of ep= (transformers' MoE has no dispatch to trace), pipeline sends of pp=.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from npuport.cost.comm import CommEstimate, LinkSystem, collective_time, system_for_chip
from npuport.cost.inventory import Inventory
from npuport.cost.roofline import ChipProfile
from npuport.coverage.hccl import hccl_support
from npuport.errors import NpuportError
from npuport.mappings import load_checked
from npuport.model.distributed import Distributed, Layout, decoder_layers, expert_parameter
from npuport.model.loading import LoadedModel
from npuport.model.scenarios import Scenario
from npuport.trace.records import CollectiveCall, Trace

_INDEX = re.compile(r"\.\d+(?=\.|$)")


@dataclass
class CommRow:
    """Collectives of one kind, op, phase, module pattern, size and group: what the report lists as one line."""

    op: str
    kind: str
    phase: str
    module: str
    nbytes: int
    dtype: str
    group_size: int
    reduce_op: str | None
    calls: int = 0
    sources: list[str] = field(default_factory=list)
    overlap: bool = False
    overlap_why: str = ""
    estimated: bool = False  # not traced: DDP buckets, expert all-to-all, pipeline sends (see the stage's notes)
    time_s: dict[str, float] = field(default_factory=dict)  # per call, per chip (target, baseline)
    algorithm: dict[str, str] = field(default_factory=dict)  # per chip: the algorithm the estimate took
    hccl: dict[str, str] | None = None  # status / note / source on the target's torch_npu release

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "kind": self.kind, "phase": self.phase, "module": self.module, "bytes": self.nbytes,
                "dtype": self.dtype, "group_size": self.group_size, "reduce_op": self.reduce_op, "calls": self.calls,
                "sources": self.sources[:5], "overlap": self.overlap, "overlap_why": self.overlap_why,
                "estimated": self.estimated, "time_s_per_call": self.time_s, "algorithm": self.algorithm,
                "total_time_s": {c: t * self.calls for c, t in self.time_s.items()}, "hccl": self.hccl}


@dataclass
class ScenarioComm:
    rows: list[CommRow]
    by_chip: dict[str, dict[str, Any]]  # chip -> bytes, exposed_s, overlappable_s, compute_s, step_s, ...

    def to_json(self) -> dict[str, Any]:
        return {"collectives": [r.to_json() for r in self.rows], "by_chip": self.by_chip}


@dataclass
class CommStage:
    distributed: Distributed
    by_scenario: dict[str, ScenarioComm]
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        d = self.distributed
        return {"world_size": d.world_size, "rank": d.rank, "layout": d.layout.describe() if d.layout else None,
                "how": d.how, "tp_plan": d.tp_plan, "estimated": d.estimated, "notes": d.notes + self.notes,
                "tp_unresolved": d.tp_unresolved, "unsharded": d.unsharded, "held_share": d.held_share}


def _overlap_rules() -> list[dict[str, Any]]:
    return list(load_checked("scale_out.yaml")["overlap"])


def _overlap(op: str, phase: str) -> tuple[bool, str]:
    for rule in _overlap_rules():
        if op.startswith(rule["op"]) and rule.get("phase", phase) == phase:
            return bool(rule["overlap"]), str(rule["why"])
    return False, ""


def _rows(calls: list[CollectiveCall]) -> list[CommRow]:
    rows: dict[tuple[Any, ...], CommRow] = {}
    for c in calls:
        pattern = _INDEX.sub(".*", c.module)
        key = (c.op, c.phase, pattern, c.nbytes, c.dtype, c.group_size, c.reduce_op)
        row = rows.get(key)
        if row is None:
            ov, why = _overlap(c.op, c.phase)
            row = rows[key] = CommRow(c.op, c.kind, c.phase, pattern, c.nbytes, c.dtype, c.group_size, c.reduce_op,
                                      overlap=ov, overlap_why=why)
        row.calls += 1
        if c.source and c.source not in row.sources:
            row.sources.append(c.source)
    return list(rows.values())


def _estimated_rows(sc: Scenario, trace: Trace, model: LoadedModel, layout: Layout) -> list[CommRow]:
    """What the layout adds that the trace cannot show, from the model's own sizes."""
    out: list[CommRow] = []
    named = [(n, p) for n, p in model.module.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    dtype = str(params[0].dtype).removeprefix("torch.") if params else "float32"
    item = params[0].element_size() if params else 4
    if sc.kind == "train" and layout.dp > 1 and layout.zero == 0:
        out += _ddp_rows(named, layout, dtype, item)
    hidden = _hidden_size(model)
    tokens = sc.batch * sc.seq
    if layout.ep > 1 and hidden:
        moe = -(-_moe_layers(trace) // layout.pp)  # this pipeline stage's MoE layers
        top_k = int(_config(model, "num_experts_per_tok") or _config(model, "moe_topk") or 1)
        if moe:
            size = tokens * top_k * hidden * item
            n = moe * 2 * (2 if sc.kind == "train" else 1)
            out.append(CommRow("_c10d_functional::all_to_all_single", "all_to_all",
                               "forward" if sc.kind != "train" else "forward+backward", "(expert dispatch and combine)",
                               size, dtype, layout.ep, None, n, overlap=False,
                               overlap_why="each MoE layer waits for its tokens (dispatch) and for their results (combine)",
                               estimated=True))
    if layout.pp > 1 and hidden:
        size = tokens * hidden * item
        n = 2 * (2 if sc.kind == "train" else 1)  # an interior stage receives and sends once per direction
        out.append(CommRow("c10d::send/recv", "send_recv", "forward" if sc.kind != "train" else "forward+backward",
                           "(pipeline stage boundary)", size, dtype, 2, None, n, overlap=False,
                           overlap_why="the next stage waits for these activations (and the previous for their gradients)",
                           estimated=True))
    return out


def _ddp_rows(named: list[tuple[str, Any]], layout: Layout, dtype: str, item: int) -> list[CommRow]:
    """DDP's gradient all-reduce in buckets of scale_out.yaml's size. This rank reduces only the gradients it holds: a
    pipeline stage's 1/pp of the parameters (an even split, as its compute is taken), and with ep= its 1/ep of the
    routed experts, whose gradients are reduced over the ranks that hold the same experts (layout.expert_dp:
    Megatron-LM's expert data-parallel group), not over every data-parallel rank."""
    def local(p: Any) -> int:
        return int(getattr(p, "_local_tensor", p).numel()) * item

    experts = sum(local(p) for n, p in named if layout.ep > 1 and expert_parameter(n))
    dense = sum(local(p) for _, p in named) - experts
    groups = [("(DDP gradient buckets)", dense // layout.pp, layout.dp)]
    if experts and layout.expert_dp > 1:
        groups.append(("(DDP gradient buckets: experts)", experts // layout.ep // layout.pp, layout.expert_dp))
    bucket = int(load_checked("scale_out.yaml")["ddp"]["bucket_bytes"])
    ov, why = _overlap("c10d::allreduce_", "backward")
    out = []
    for label, grad_bytes, group in groups:
        full, rest = divmod(grad_bytes, bucket)
        for n, size in ((full, bucket), (1 if rest else 0, rest)):
            if n:
                out.append(CommRow("c10d::allreduce_", "all_reduce", "backward", label, size, dtype, group, "sum", n,
                                   overlap=ov, overlap_why=why, estimated=True))
    return out


def _config(model: LoadedModel, key: str) -> Any:
    cfg = getattr(model.module, "config", None)
    for c in (cfg, getattr(cfg, "text_config", None)):
        if c is not None and getattr(c, key, None) is not None:
            return getattr(c, key)
    return None


def _hidden_size(model: LoadedModel) -> int | None:
    value = _config(model, "hidden_size") or _config(model, "d_model") or _config(model, "n_embd")
    return int(value) if value else None


def _moe_layers(trace: Trace) -> int:
    """Decoder layers with experts: module instances of an *Experts / *MoE type in the trace."""
    names = {path for path, kind in trace.modules.items() if kind.endswith(("Experts", "SparseMoeBlock", "MoE", "Moe"))}
    layers = {m.group(0) for p in names for m in [re.search(r"^.*?\.\d+", p)] if m}
    return len(layers) or len(names)


def _system(chip: ChipProfile) -> LinkSystem | None:
    try:
        return system_for_chip(chip.name)
    except NpuportError:  # no link model pairs with this chip: no time, said in a note
        return None


def _members_per_node(row: CommRow, system: LinkSystem, layout: Layout | None) -> int:
    """How many of a group's ranks share a node. Ranks are numbered tensor-parallel innermost (torch's DeviceMesh
    order): a tensor-parallel group is contiguous, a data-parallel group strides by tp."""
    stride = layout.tp if layout is not None and row.group_size != layout.tp else 1
    return max(1, system.ranks_per_node // stride)


def _time_rows(rows: list[CommRow], chips: list[ChipProfile], torch_npu: str | None, layout: Layout | None) -> list[str]:
    notes: list[str] = []
    for chip in chips:
        system = _system(chip)
        if system is None:
            if rows:
                notes.append(f"communication: no link model pairs with {chip.name} (mappings/links.yaml): no time for it")
            continue
        for row in rows:
            try:
                est: CommEstimate = collective_time(row.kind, row.nbytes, row.group_size, system,
                                                    ranks_per_node=min(row.group_size, _members_per_node(row, system, layout)))
            except NpuportError as exc:
                notes.append(f"communication: {row.kind} over {row.group_size} ranks on {system.name}: {exc.what}")
                continue
            row.time_s[chip.name] = est.seconds
            row.algorithm[chip.name] = " + ".join(f"{lvl} {alg}" for lvl, alg, _ in est.steps) + (
                " (line rate: a lower bound)" if est.line_rate else "")
    for row in rows:
        if torch_npu is not None and not row.estimated:
            sup = hccl_support(torch_npu, row.op, row.dtype, row.reduce_op)
            row.hccl = {"status": sup.status, "note": sup.note, "source": sup.source}
    return notes


def comm_stage(model: LoadedModel, scenarios: list[Scenario], traces: dict[str, Trace], inventory: Inventory,
               target: ChipProfile, baseline: ChipProfile | None, torch_npu: str | None) -> CommStage | None:
    info = model.distributed
    if info is None:
        return None
    chips = [target] + ([baseline] if baseline is not None and baseline.name != target.name else [])
    by: dict[str, ScenarioComm] = {}
    notes: list[str] = []
    for sc in scenarios:
        trace = traces.get(sc.name)
        if trace is None:
            continue
        calls, stage_note = _first_stage(trace.collectives, model, info.layout)
        if stage_note:
            notes.append(stage_note)
        rows = _rows(calls)
        if info.layout is not None:
            rows += _estimated_rows(sc, trace, model, info.layout)
        notes += _time_rows(rows, chips, torch_npu, info.layout)
        by[sc.name] = ScenarioComm(rows, _split(rows, chips, inventory, sc.name, info.layout))
    if any(r.hccl and r.hccl["status"] not in ("supported",) for s in by.values() for r in s.rows):
        notes.append("communication: some collectives are not plainly supported by HCCL on torch_npu "
                     f"{torch_npu} (see the hccl column)")
    return CommStage(info, by, sorted(set(notes), key=notes.index))


def _first_stage(calls: list[CollectiveCall], model: LoadedModel,
                 layout: Layout | None) -> tuple[list[CollectiveCall], str | None]:
    """With pp>1 the rank traces every decoder layer, but a pipeline stage runs only its own: the collectives of the
    first stage's layers (the first ceil(layers / pp), the stage whose memory and compute the audit takes) and of the
    root (its embedding's; the last stage's head is not told apart) are kept, the other layers' dropped."""
    if layout is None or layout.pp <= 1 or not calls:
        return calls, None
    names = [n for n, _ in decoder_layers(model.module)]
    if not names:
        return calls, None
    ours = set(names[:-(-len(names) // layout.pp)])
    every = set(names)
    prefix = names[0].rsplit(".", 1)[0] + "."

    def stage_of(module: str) -> bool:
        if not module.startswith(prefix):
            return True
        layer = prefix + module[len(prefix):].split(".", 1)[0]
        return layer not in every or layer in ours

    kept = [c for c in calls if stage_of(c.module)]
    return kept, (f"communication: pp={layout.pp}: the traced collectives of the first pipeline stage's {len(ours)} of "
                  f"{len(names)} decoder layers and of the root; the rank traced every layer")


def _split(rows: list[CommRow], chips: list[ChipProfile], inventory: Inventory, scenario: str,
           layout: Layout | None) -> dict[str, dict[str, Any]]:
    """Per chip: bytes moved, time exposed on the step's critical path, time that can overlap compute, the compute
    it can hide behind, and the step with communication. One footing for every chip: `compute_s` is the step's
    device time on that chip (its kernels, host excluded), `wall_s` the estimated step's wall time (host included),
    `step_s` that wall plus what is exposed plus the overlappable part longer than the wall: a collective on its own
    stream runs while the step's kernels do and in the idle gaps of a host-bound step alike, so only what outlasts
    the whole step extends it (`added_s`: what communication adds to the step). Pipeline parallel runs about 1/pp of
    the layers per stage (an estimate): `wall_s` and `compute_s` are then the stage's, `traced_wall_s` the wall of the
    whole model the rank traced (the scenario's step), `pipeline_stages` the pp it was divided by."""
    out: dict[str, dict[str, Any]] = {}
    totals = inventory.totals[scenario]
    stages = layout.pp if layout is not None and layout.pp > 1 else 1
    for chip in chips:
        traced = wall = totals.time_by_chip.get(chip.name, 0.0)
        device = totals.device_by_chip.get(chip.name, wall)
        device, wall = device / stages, wall / stages
        exposed = sum(r.time_s.get(chip.name, 0.0) * r.calls for r in rows if not r.overlap)
        hideable = sum(r.time_s.get(chip.name, 0.0) * r.calls for r in rows if r.overlap)
        spill = max(0.0, hideable - wall)
        comm = exposed + hideable
        out[chip.name] = {
            "bytes": float(sum(r.nbytes * r.calls for r in rows)),
            "communication_s": comm, "exposed_s": exposed, "overlappable_s": hideable, "compute_s": device,
            "wall_s": wall,
            "hidden": hideable <= wall,  # what can overlap fits within the step
            "compute_to_communication": device / comm if comm else None,
            "step_s": wall + exposed + spill,
            "added_s": exposed + spill,
            "to_hide": [] if hideable <= wall else to_hide(rows, layout),
        }
        if stages > 1:
            out[chip.name] |= {"traced_wall_s": traced, "pipeline_stages": stages}
    return out


def to_hide(rows: list[CommRow], layout: Layout | None) -> list[str]:
    """What makes the overlappable communication fit behind compute, for this layout only: ZeRO-2 only where
    ZeRO-3 re-gathers, gradient accumulation only where gradients are reduced per step, and so on."""
    kinds = {(r.op, r.phase) for r in rows if r.overlap}
    out = ["larger batches per rank (more compute behind the same bytes)"]
    regathers = any(op.startswith("c10d::_allgather_base_") and phase == "backward" for op, phase in kinds)
    if layout is not None and layout.zero == 3 and regathers:
        out.append("ZeRO-2 instead of 3 (zero=2: parameters kept gathered after forward, no all-gather in backward)")
    elif layout is None and regathers:
        out.append("reshard_after_forward=False in fully_shard (parameters kept gathered after forward, no all-gather "
                   "in backward)")
    if any(op.startswith(("c10d::allreduce_", "c10d::_reduce_scatter_base_")) for op, _ in kinds):
        out.append("gradient accumulation over micro-batches (one gradient reduction per several micro-batches)")
    return out
