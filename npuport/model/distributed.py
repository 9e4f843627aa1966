"""Run a model as one rank of a distributed job, on fake tensors, under torch's fake process group.

Two ways to say how the model is distributed:
- the model file's own `parallelize(model, device_type)` (FSDP2's `fully_shard`, `parallelize_module`, DTensor),
  called as written with `--world-size N [--rank R]`;
- `--parallel tp=8,dp=4,zero=3` (and `ep=`, `pp=`): a standard layout npuport applies to an HF model (tensor
  parallel by transformers' own plan, FSDP2 per decoder layer), or, for what cannot be traced here, an estimate.

The order matters and is torch's (facts: scale-out-tracing.md): the process group and every DeviceMesh are made
outside FakeTensorMode, the model is built under it, `fully_shard` / `parallelize_module` run outside it on the
fake parameters, and the step runs under it again. The fake backend sends nothing: its collectives run their Meta
kernels, so shapes, dtypes and group sizes are exact while no rank exists but this one.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from npuport.errors import NpuportError, describe_exception
from npuport.model.job import Layout, parse_layout, stage_ranks
from npuport.model.tp_plan import apply_plan, describe_unsharded, hf_tp_plan

MESH_DEVICE = "cpu"  # the fake backend serves cpu meshes; a model file's parallelize() gets this device type


@dataclass
class Distributed:
    """How the traced rank is placed: world size, rank, layout, how it was applied and what is only estimated."""

    world_size: int
    rank: int
    layout: Layout | None = None
    how: str = ""  # "parallelize() of the model file", "--parallel", "none"
    notes: list[str] = field(default_factory=list)
    estimated: list[str] = field(default_factory=list)  # the parts of the layout that are estimates, not traced
    tp_plan: dict[str, str] = field(default_factory=dict)  # module pattern -> style, as applied
    # plan key -> where it could not be resolved (torch skipped it there): [{module pattern, missing submodule path}]
    tp_unresolved: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    # parameters the layout leaves whole on every rank, per module pattern (npuport.model.tp_plan.unsharded)
    unsharded: list[dict[str, Any]] = field(default_factory=list)
    library_warnings: list[str] = field(default_factory=list)  # what torch warned while sharding (--debug shows it)
    # the share of the traced rank's parameters a rank of the job holds where the layout is estimated, not traced:
    # its pipeline stage's 1/pp, and 1/ep of the routed experts ((dense + experts / ep) / pp over all; 1.0 without)
    held_share: float = 1.0


@contextlib.contextmanager
def fake_world(world_size: int, rank: int) -> Iterator[None]:
    """torch's fake process group for the duration: this process is rank `rank` of `world_size`."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise NpuportError("cannot trace as that rank", "--world-size N of at least 1 and 0 <= --rank < N",
                           f"world size {world_size}, rank {rank}")
    if not dist.is_available():
        raise NpuportError("torch.distributed is not available in this torch build", "a torch with distributed support",
                           torch.__version__)
    if dist.is_initialized():
        raise NpuportError("a process group is already initialized in this process",
                           "npuport to own the (fake) process group of the audit", str(dist.get_backend()))
    dist.init_process_group("fake", rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def distribute(module: torch.nn.Module, parallelize: Callable[..., Any] | None, layout: Layout | None,
               world_size: int, rank: int) -> tuple[torch.nn.Module, Distributed]:
    """Shard `module` as this rank holds it: by `layout` (--parallel), else by the model file's parallelize()."""
    if layout is not None:
        info = apply_layout(module, layout, own_parallelize=parallelize is not None)
        if parallelize is not None:
            info.notes.append("--parallel given: the model file's parallelize() was not called")
        return module, info
    if parallelize is not None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sharded = call_parallelize(parallelize, module, "parallelize(model, device_type)")
        info = Distributed(world_size, rank, None, "parallelize() of the model file")
        info.library_warnings = _lines(caught)
        return sharded, info
    return module, Distributed(world_size, rank, None, "none", notes=[
        f"--world-size {world_size}: the model defines no parallelize(model, device_type), so every rank runs it whole "
        "and issues no collective (give one, or --parallel for an HF model)"])


def _lines(caught: list[warnings.WarningMessage]) -> list[str]:
    return [f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught]


def call_parallelize(fn: Callable[..., Any], module: torch.nn.Module, where: str) -> torch.nn.Module:
    """The model file's parallelize(model, device_type), outside FakeTensorMode; it may return the model or None."""
    try:
        out = fn(module, MESH_DEVICE)
    except NpuportError:
        raise
    except Exception as exc:
        raise NpuportError(f"{where} raised an exception", "parallelize(model, device_type) to shard the model on a "
                           f"{MESH_DEVICE!r} DeviceMesh under the fake process group", describe_exception(exc)) from None
    if out is not None and not isinstance(out, torch.nn.Module):
        raise NpuportError(f"{where} returned {type(out).__name__}", "the model (an nn.Module) or None", type(out).__name__)
    return out if out is not None else module


def apply_layout(module: torch.nn.Module, layout: Layout, own_parallelize: bool = False) -> Distributed:
    """Apply `layout` to an HF-style model (outside FakeTensorMode): tensor parallel by transformers' own plan,
    FSDP2 per decoder layer for ZeRO; returns what was applied and which parts are estimates instead. The fake
    process group spans one pipeline stage (dp x tp ranks): the traced rank's groups. `own_parallelize`: the model
    file has a parallelize() of its own (what a refusal points to)."""
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415 - only for --parallel

    check_layout_fits(module, layout)
    info = Distributed(layout.world_size, dist.get_rank(), layout, "--parallel")
    if layout.pp > 1:
        info.estimated.append(f"pp={layout.pp}: pipeline stages are estimated, not traced: the rank traces every layer; "
                              "each stage runs about 1/pp of them and sends its activations to the next")
    if layout.ep > 1:
        info.estimated.append(f"ep={layout.ep}: the expert all-to-alls are estimated from the routed tokens "
                              "(transformers' MoE has no expert-parallel dispatch to trace)")
    if layout.dp > 1 and layout.zero == 0:
        info.estimated.append(f"dp={layout.dp} without ZeRO (DDP): the gradient all-reduce is estimated "
                              "(buckets of 25 MB, DDP's default)"
                              + (f"; expert gradients over the {layout.expert_dp} rank(s) holding the same experts"
                                 if layout.ep > 1 else "")
                              + (f"; this stage's 1/{layout.pp} of the parameters" if layout.pp > 1 else ""))
    dims = [(name, n) for name, n in (("dp", layout.dp), ("tp", layout.tp)) if n > 1]
    if dims:
        mesh = init_device_mesh(MESH_DEVICE, tuple(n for _, n in dims), mesh_dim_names=tuple(name for name, _ in dims))
        if layout.tp > 1:
            _tensor_parallel(module, mesh["tp"], info, own_parallelize)
        if layout.dp > 1 and layout.zero > 0:
            _fully_shard(module, mesh["dp"], reshard=layout.zero == 3, info=info)
    if layout.ep > 1 and layout.zero:  # FSDP2 shards the experts over dp, as ep's ranks hold them at rest
        info.estimated.append(f"ep={layout.ep} with zero={layout.zero}: the traced FSDP2 spreads every expert over the "
                              "dp ranks, as a rank of this job holds them between steps, but gathers whole expert layers "
                              "over dp in forward and backward where expert parallel gathers none: the expert part of "
                              "the all-gathers and of the traced peak is overstated")
    if (layout.ep > 1 and not layout.zero) or layout.pp > 1:  # of the traced rank's (sharded) parameters
        split = " and ".join(s for s, on in ((f"the experts over ep={layout.ep}", layout.ep > 1 and not layout.zero),
                                              (f"the layers over pp={layout.pp}", layout.pp > 1)) if on)
        info.held_share = held_share(module, layout)
        info.estimated.append(f"memory: the traced rank holds every parameter; a rank of this job holds {split} "
                              f"only (about {info.held_share:.0%} of them): weights, gradients and optimizer states "
                              "per rank are scaled to that share (the layers split evenly over the stages)")
    return info


_EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")


def _text_config(module: torch.nn.Module) -> Any:
    config: Any = getattr(module, "config", None)
    try:
        return config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:  # several text configs: nothing to check against
        return None


def experts_of(module: torch.nn.Module) -> int:
    """The routed experts per MoE layer the model's config names (0 for a dense model or no config)."""
    config = _text_config(module)
    for key in _EXPERT_KEYS:
        n = getattr(config, key, None) if config is not None else None
        if isinstance(n, int) and n > 0:
            return n
    return 0


def check_layout_fits(module: torch.nn.Module, layout: Layout) -> None:
    """What only the built model can refuse: more pipeline stages than decoder layers, expert parallel on a model
    without experts or over a count that does not divide them (each one line naming the layout)."""
    name = type(module).__name__
    if layout.pp > 1:
        layers = len(decoder_layers(module))
        if layout.pp > layers:
            raise NpuportError(f"--parallel {layout.describe()}: pp={layout.pp} stages for {layers} decoder layers",
                               "pp of at most the model's decoder layers (each stage runs at least one)",
                               f"{name} with {layers} decoder layers")
    if layout.ep > 1:
        experts = experts_of(module)
        if not experts:
            raise NpuportError(f"--parallel {layout.describe()}: ep={layout.ep} spreads experts, and the model has none",
                               "a mixture-of-experts model (its config names its experts) for ep=",
                               f"{name}, no n_routed_experts / num_experts / num_local_experts in its config")
        if experts % layout.ep:
            raise NpuportError(f"--parallel {layout.describe()}: ep={layout.ep} does not divide the model's {experts} "
                               "experts", "an expert-parallel degree that divides the experts per layer",
                               f"ep={layout.ep}, {experts} experts")


# the head counts a tensor-parallel plan splits when it shards the attention projections (its q/k/v patterns)
_TP_HEADS = ("num_attention_heads", "num_key_value_heads")


def _tp_divides(module: torch.nn.Module, tp: int, plan: dict[str, str]) -> None:
    """tp must divide the heads the plan splits: tp=3 on 32 heads would fail later, inside the model, as a shape
    error that names neither tp nor the heads. (Other widths are split only where the plan says, and torch's own
    sharding reports those.)"""
    if not any(p.endswith(("q_proj", "k_proj", "v_proj", "qkv_proj")) for p in plan):
        return
    config = _text_config(module)
    for key in _TP_HEADS:
        n = getattr(config, key, None) if config is not None else None
        if isinstance(n, int) and n > 0 and n % tp:
            raise NpuportError(f"--parallel tp={tp}: tp does not divide the model's {key} ({n})",
                               f"a tensor-parallel degree that divides {key}", f"tp={tp}")


def _tensor_parallel(module: torch.nn.Module, mesh: Any, info: Distributed, own_parallelize: bool) -> None:
    plan = hf_tp_plan(module)
    tp = mesh.size()
    if not plan:
        name = type(module).__name__
        if own_parallelize:  # a model file's parallelize() makes its own mesh from the world size: that is its layout
            raise NpuportError(f"--parallel tp={tp} needs transformers' tensor-parallel plan (base_model_tp_plan), and "
                               f"{name} has none", "for a model file with its own parallelize(model, device_type): "
                               "--world-size N instead of --parallel (its parallelize() lays the ranks out itself)",
                               f"--parallel {info.layout.describe() if info.layout else f'tp={tp}'} on {name}")
        raise NpuportError(f"--parallel tp={tp} needs the model's tensor-parallel plan", "an HF model whose config has "
                           "a base_model_tp_plan, or a model file with parallelize(model, device_type) run with "
                           "--world-size N", f"{name}: no base_model_tp_plan, no parallelize()")
    _tp_divides(module, tp, plan)
    result = apply_plan(module, mesh, plan)
    info.tp_plan = result.applied
    info.tp_unresolved = result.unresolved
    info.unsharded = result.unsharded
    info.library_warnings += result.library_warnings
    info.notes += result.notes + describe_unsharded(tp, result)


def decoder_layers(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The repeated blocks FSDP wraps one by one: the children of the largest ModuleList of same-type modules."""
    best: list[tuple[str, torch.nn.Module]] = []
    for name, child in module.named_modules():
        if isinstance(child, torch.nn.ModuleList) and len(child) > len(best):
            kinds = {type(m) for m in child}
            if len(kinds) == 1:
                best = [(f"{name}.{i}", m) for i, m in enumerate(child)]
    return best


def dtype_apart(module: torch.nn.Module, skip: set[int] | None = None) -> list[tuple[str, torch.nn.Module]]:
    """The submodules FSDP2 must wrap on their own before `module`: FSDP2 gathers one dtype per wrapped module
    (torch's FSDPParamGroup asserts a uniform original dtype), and a model may keep some weights in another dtype
    than the rest of its layer (DeepSeek-V3's router in float32 in a bfloat16 layer). The outermost submodules whose
    parameters are all of one dtype other than the one most of `module`'s own parameters have (by elements); the
    modules in `skip` (already wrapped) and their parameters are left out. Empty when `module` is uniform."""
    skip = skip or set()
    held: dict[torch.dtype, int] = {}
    for p in _own_params(module, skip):
        held[p.dtype] = held.get(p.dtype, 0) + p.numel()
    if len(held) < 2:
        return []
    main = max(held, key=lambda d: held[d])
    out: list[tuple[str, torch.nn.Module]] = []
    taken: list[str] = []
    for name, sub in module.named_modules():
        if not name or id(sub) in skip or any(name.startswith(t + ".") for t in taken):
            continue
        dtypes = {p.dtype for p in _own_params(sub, skip)}
        if len(dtypes) == 1 and main not in dtypes:
            out.append((name, sub))
            taken.append(name)
    return out


def _own_params(module: torch.nn.Module, skip: set[int]) -> list[torch.nn.Parameter]:
    """`module`'s parameters, those under the modules in `skip` left out."""
    out: list[torch.nn.Parameter] = []
    stack = [module]
    while stack:
        m = stack.pop()
        out.extend(m.parameters(recurse=False))
        stack.extend(c for c in m.children() if id(c) not in skip)
    return out


def _pattern(name: str) -> str:
    """'mlp.gate' for 'model.layers.7.mlp.gate': a submodule named as in every layer."""
    return ".".join(part for part in name.split(".") if not part.isdigit()) or name


def _fully_shard(module: torch.nn.Module, mesh: Any, reshard: bool, info: Distributed) -> None:
    from torch.distributed.fsdp import fully_shard  # noqa: PLC0415 - only for --parallel

    layers = decoder_layers(module)
    apart: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for _, layer in layers:
                for name, sub in dtype_apart(layer):
                    fully_shard(sub, mesh=mesh, reshard_after_forward=reshard)
                    apart.append(name)
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
            wrapped = {id(layer) for _, layer in layers}
            for name, sub in dtype_apart(module, skip=wrapped):
                fully_shard(sub, mesh=mesh, reshard_after_forward=reshard)
                apart.append(name)
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
        except Exception as exc:
            raise NpuportError("applying FSDP2 (fully_shard) failed", "a model whose decoder layers FSDP2 can wrap",
                               describe_exception(exc)) from None
    info.library_warnings += _lines(caught)
    stage = "parameters, gradients and optimizer states" if reshard else "gradients and optimizer states"
    info.notes.append(f"FSDP2 over dp={mesh.size()}: {len(layers)} decoder layers and the root wrapped, {stage} "
                      f"sharded (reshard_after_forward={reshard})")
    if apart:
        kinds = sorted({_pattern(name) for name in apart})
        info.notes.append(f"FSDP2 gathers one dtype per wrapped module: {len(apart)} submodule{'s' if len(apart) != 1 else ''} "
                          f"whose parameters keep another dtype than their layer's ({', '.join(kinds[:3])}{', ...' if len(kinds) > 3 else ''})"
                          " wrapped on their own first, one more all-gather and reduce-scatter each, as a job that "
                          "keeps them so must")


def at_rest(module: torch.nn.Module) -> None:
    """Put every FSDP2 module back to its sharded parameters. With reshard_after_forward=False (zero=1 / 2), or after
    an inference forward that no backward followed, FSDP2 keeps the gathered parameters: the next scenario traced on
    the same model would start with them (a train after a decode counted whole weights). A step starts at rest."""
    from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415 - only where FSDP2 wrapped the model

    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def parameter_bytes(module: torch.nn.Module) -> tuple[int, int]:
    """(dense, routed-expert) bytes of the traced rank's parameters (its shards where sharded)."""
    experts = dense = 0
    for name, p in module.named_parameters():
        n = getattr(p, "_local_tensor", p).numel() * p.element_size()
        if expert_parameter(name):
            experts += n
        else:
            dense += n
    return dense, experts


def held_share(module: torch.nn.Module, layout: Layout) -> float:
    """(dense + routed experts / ep) / pp over all the parameters: what a rank of the job holds of what the traced
    rank holds, where expert and pipeline parallel are estimates (an even split of the layers over the stages). With
    zero= the traced FSDP2 already spreads the experts over the dp ranks, as a rank of the job holds them: ep divides
    nothing more there (npuport.audit.memory_stage.rank_share, which the memory figures use, agrees)."""
    dense, experts = parameter_bytes(module)
    spread = layout.ep if layout.zero == 0 else 1
    total = experts + dense
    return (dense + experts / spread) / layout.pp / total if total else 1.0


def expert_parameter(name: str) -> bool:
    """A routed expert's parameter: under a module named `experts` (shared experts, `shared_expert(s)`, run on every
    rank and are not split by expert parallel)."""
    return "experts" in name.split(".")[:-1]


__all__ = ["Distributed", "Layout", "MESH_DEVICE", "apply_layout", "at_rest", "call_parallelize", "check_layout_fits",
           "decoder_layers", "distribute", "expert_parameter", "parameter_bytes", "experts_of", "fake_world", "parse_layout",
           "stage_ranks"]
