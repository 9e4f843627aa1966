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
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from npuport.errors import NpuportError, describe_exception

MESH_DEVICE = "cpu"  # the fake backend serves cpu meshes; a model file's parallelize() gets this device type


@dataclass(frozen=True)
class Layout:
    """A standard parallel layout: tensor, data (with its ZeRO stage), expert and pipeline parallel degrees."""

    tp: int = 1
    dp: int = 1
    zero: int = 0  # 0: replicated data parallel (DDP), 1 / 2: gradients and optimizer sharded, 3: parameters too
    ep: int = 1
    pp: int = 1

    @property
    def world_size(self) -> int:
        return self.tp * self.dp * self.pp  # expert parallel reuses the data-parallel ranks

    def describe(self) -> str:
        parts = [f"{k}={getattr(self, k)}" for k in ("tp", "dp", "zero", "ep", "pp")
                 if getattr(self, k) != (0 if k == "zero" else 1)]
        return ",".join(parts) or "tp=1"


_KEYS = ("tp", "dp", "zero", "ep", "pp")


def parse_layout(text: str) -> Layout:
    """'tp=8,dp=4,zero=3' -> Layout; a bad key or value is a usage error (one line, exit 2)."""
    values: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in _KEYS or not value.isdigit():
            raise NpuportError(f"cannot read --parallel {text!r}", "comma-separated KEY=N with KEY one of tp, dp, zero, "
                               "ep, pp (e.g. tp=8,dp=4,zero=3)", part)
        values[key] = int(value)
    lay = Layout(**values)
    if min(lay.tp, lay.dp, lay.ep, lay.pp) < 1 or lay.zero not in (0, 1, 2, 3):
        raise NpuportError(f"cannot use --parallel {text!r}", "tp, dp, ep, pp of at least 1 and zero 0-3", lay.describe())
    if lay.ep > 1 and (lay.dp * lay.tp) % lay.ep:
        raise NpuportError(f"cannot use --parallel {text!r}", "ep dividing dp x tp (experts spread over the data- and "
                           "tensor-parallel ranks)", f"ep={lay.ep}, dp x tp = {lay.dp * lay.tp}")
    return lay


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
        info = apply_layout(module, layout)
        if parallelize is not None:
            info.notes.append("--parallel given: the model file's parallelize() was not called")
        return module, info
    if parallelize is not None:
        sharded = call_parallelize(parallelize, module, "parallelize(model, device_type)")
        return sharded, Distributed(world_size, rank, None, "parallelize() of the model file")
    return module, Distributed(world_size, rank, None, "none", notes=[
        f"--world-size {world_size}: the model defines no parallelize(model, device_type), so every rank runs it whole "
        "and issues no collective (give one, or --parallel for an HF model)"])


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


# transformers' tensor-parallel styles -> torch's: the ones with a plain torch equivalent
def _styles() -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard  # noqa: PLC0415 - distributed tensor only when asked
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel  # noqa: PLC0415

    return {
        "colwise": ColwiseParallel(),
        "rowwise": RowwiseParallel(),
        "colwise_gather_output": ColwiseParallel(output_layouts=Replicate()),
        "rowwise_split_input": RowwiseParallel(input_layouts=Shard(-1)),
    }


def apply_layout(module: torch.nn.Module, layout: Layout) -> Distributed:
    """Apply `layout` to an HF-style model (outside FakeTensorMode): tensor parallel by transformers' own plan,
    FSDP2 per decoder layer for ZeRO; returns what was applied and which parts are estimates instead. The fake
    process group spans one pipeline stage (dp x tp ranks): the traced rank's groups."""
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415 - only for --parallel

    info = Distributed(layout.world_size, dist.get_rank(), layout, "--parallel")
    if layout.pp > 1:
        info.estimated.append(f"pp={layout.pp}: pipeline stages are estimated, not traced: the rank traces every layer; "
                              "each stage runs about 1/pp of them and sends its activations to the next")
    if layout.ep > 1:
        info.estimated.append(f"ep={layout.ep}: the expert all-to-alls are estimated from the routed tokens "
                              "(transformers' MoE has no expert-parallel dispatch to trace)")
    if layout.dp > 1 and layout.zero == 0:
        info.estimated.append(f"dp={layout.dp} without ZeRO (DDP): the gradient all-reduce is estimated "
                              "(buckets of 25 MB, DDP's default)")
    dims = [(name, n) for name, n in (("dp", layout.dp), ("tp", layout.tp)) if n > 1]
    if not dims:
        return info
    mesh = init_device_mesh(MESH_DEVICE, tuple(n for _, n in dims), mesh_dim_names=tuple(name for name, _ in dims))
    if layout.tp > 1:
        info.tp_plan = _tensor_parallel(module, mesh["tp"], info)
    if layout.dp > 1 and layout.zero > 0:
        _fully_shard(module, mesh["dp"], reshard=layout.zero == 3, info=info)
    return info


# the head counts a tensor-parallel plan splits when it shards the attention projections (its q/k/v patterns)
_TP_HEADS = ("num_attention_heads", "num_key_value_heads")


def _tp_divides(module: torch.nn.Module, tp: int, plan: dict[str, str]) -> None:
    """tp must divide the heads the plan splits: tp=3 on 32 heads would fail later, inside the model, as a shape
    error that names neither tp nor the heads. (Other widths are split only where the plan says, and torch's own
    sharding reports those.)"""
    if not any(p.endswith(("q_proj", "k_proj", "v_proj", "qkv_proj")) for p in plan):
        return
    config: Any = getattr(module, "config", None)
    try:
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
    except ValueError:  # several text configs: nothing to check against
        return
    for key in _TP_HEADS:
        n = getattr(config, key, None)
        if isinstance(n, int) and n > 0 and n % tp:
            raise NpuportError(f"tp={tp} does not divide the model's {key} ({n})",
                               f"a tensor-parallel degree that divides {key}", f"tp={tp}")


def stage_ranks(layout: Layout) -> int:
    """The ranks of one pipeline stage: the fake process group the traced rank belongs to."""
    return layout.dp * layout.tp


def _tensor_parallel(module: torch.nn.Module, mesh: Any, info: Distributed) -> dict[str, str]:
    from torch.distributed.tensor.parallel import parallelize_module  # noqa: PLC0415 - only for --parallel

    plan = _hf_tp_plan(module)
    if not plan:
        raise NpuportError("tp= needs the model's tensor-parallel plan", "an HF model whose config has a "
                           "base_model_tp_plan, or a model file with parallelize(model, device_type)",
                           type(module).__name__)
    _tp_divides(module, mesh.size(), plan)
    base, prefix = _base_model(module)
    styles = _styles()
    applied: dict[str, Any] = {}
    for pattern, style in plan.items():
        if style in styles:
            applied[pattern] = styles[style]
        else:
            info.notes.append(f"tensor-parallel style {style!r} of {prefix + pattern} has no plain torch equivalent: "
                              "left replicated")
    try:
        parallelize_module(base, mesh, applied)
    except Exception as exc:
        raise NpuportError("applying the tensor-parallel plan failed", "transformers' base_model_tp_plan to apply with "
                           "torch's parallelize_module", describe_exception(exc)) from None
    return {prefix + k: plan[k] for k in applied}


def _hf_tp_plan(module: torch.nn.Module) -> dict[str, str]:
    config = getattr(module, "config", None)
    plan = getattr(config, "base_model_tp_plan", None) if config is not None else None
    text_config = getattr(config, "text_config", None)
    if not plan and text_config is not None:
        plan = getattr(text_config, "base_model_tp_plan", None)
    return dict(plan or {})


def _base_model(module: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """transformers' base model (its plan's keys are relative to it) and its path in the module."""
    prefix = getattr(module, "base_model_prefix", "")
    base = getattr(module, prefix, None) if prefix else None
    if isinstance(base, torch.nn.Module):
        return base, prefix + "."
    return module, ""


def decoder_layers(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The repeated blocks FSDP wraps one by one: the children of the largest ModuleList of same-type modules."""
    best: list[tuple[str, torch.nn.Module]] = []
    for name, child in module.named_modules():
        if isinstance(child, torch.nn.ModuleList) and len(child) > len(best):
            kinds = {type(m) for m in child}
            if len(kinds) == 1:
                best = [(f"{name}.{i}", m) for i, m in enumerate(child)]
    return best


def _fully_shard(module: torch.nn.Module, mesh: Any, reshard: bool, info: Distributed) -> None:
    from torch.distributed.fsdp import fully_shard  # noqa: PLC0415 - only for --parallel

    layers = decoder_layers(module)
    try:
        for _, layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
    except Exception as exc:
        raise NpuportError("applying FSDP2 (fully_shard) failed", "a model whose decoder layers FSDP2 can wrap",
                           describe_exception(exc)) from None
    stage = "parameters, gradients and optimizer states" if reshard else "gradients and optimizer states"
    info.notes.append(f"FSDP2 over dp={mesh.size()}: {len(layers)} decoder layers and the root wrapped, {stage} "
                      f"sharded (reshard_after_forward={reshard})")

