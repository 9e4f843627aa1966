"""Tensor parallel by transformers' own plan (`base_model_tp_plan`), applied with torch's `parallelize_module`, and
what the plan leaves whole on every rank.

transformers' plans name module paths; torch skips a path it cannot resolve with a UserWarning per module and goes
on (torch/distributed/tensor/parallel/api.py, `parallelize_module`). A mixture-of-experts model's plan names the
dense MLP's `gate_proj` / `up_proj` / `down_proj`, which its sparse blocks do not have: transformers splits their
experts by its expert-parallel plan (`base_model_ep_plan`), not by the tensor-parallel one. Those experts then stay
whole on every rank, and that is most of the model: said in the report, never as a library warning.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any

import torch

from npuport.errors import NpuportError, describe_exception
from npuport.render.fmt import fmt_bytes

_INDEX = re.compile(r"\.\d+(?=\.|$)")


@dataclass
class PlanResult:
    """What applying the plan did: the entries applied, the entries torch could not resolve (plan key -> the module
    patterns it stopped in and the submodule path they lack), the parameters left whole on every rank (module pattern -> type, bytes), and the
    warnings the libraries gave on the way (shown with --debug)."""

    applied: dict[str, str] = field(default_factory=dict)
    unresolved: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    unsharded: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    library_warnings: list[str] = field(default_factory=list)


def styles() -> dict[str, Any]:
    """transformers' tensor-parallel styles -> torch's, the ones with a plain torch equivalent. As transformers
    registers them (transformers/distributed/tensor_parallel.py, ALL_PARALLEL_STYLES): `colwise_gather_output` is
    column-parallel with a replicated output; `rowwise_split_input` is row-parallel whose input arrives whole
    (Replicate) and is split locally, not one that arrives already split (Shard(-1): that reads a whole input as a
    shard and fails in the matmul)."""
    from torch.distributed.tensor import Replicate  # noqa: PLC0415 - distributed tensor only when asked
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel  # noqa: PLC0415

    return {
        "colwise": ColwiseParallel(),
        "rowwise": RowwiseParallel(),
        "colwise_gather_output": ColwiseParallel(output_layouts=Replicate()),
        "rowwise_split_input": RowwiseParallel(input_layouts=Replicate()),
    }


def hf_tp_plan(module: torch.nn.Module) -> dict[str, str]:
    config = getattr(module, "config", None)
    plan = getattr(config, "base_model_tp_plan", None) if config is not None else None
    text_config = getattr(config, "text_config", None)
    if not plan and text_config is not None:
        plan = getattr(text_config, "base_model_tp_plan", None)
    return dict(plan or {})


def base_model(module: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """transformers' base model (its plan's keys are relative to it) and its path in the module."""
    prefix = getattr(module, "base_model_prefix", "")
    base = getattr(module, prefix, None) if prefix else None
    if isinstance(base, torch.nn.Module):
        return base, prefix + "."
    return module, ""


def pattern(path: str) -> str:
    """model.layers.3.mlp -> model.layers.*.mlp"""
    return _INDEX.sub(".*", path)


def unresolved_in(module: torch.nn.Module, key: str, prefix: str = "") -> list[tuple[str, str]]:
    """Where plan `key` stops resolving, walked as torch's parallelize_module walks it (one dotted token at a time,
    fnmatch against the children's names): (the module path, the rest of the key it has no submodule for) per
    branch that stops; [] when every branch reaches a module."""
    token, _, rest = key.partition(".")
    matched = [(n, m) for n, m in module.named_children() if fnmatch(n, token)]
    if not matched:
        return [(prefix.rstrip(".") or "(root)", key)]
    if not rest:
        return []
    return [hit for n, m in matched for hit in unresolved_in(m, rest, f"{prefix}{n}.")]


def apply_plan(module: torch.nn.Module, mesh: Any, plan: dict[str, str]) -> PlanResult:
    """Apply `plan` to transformers' base model of `module` over `mesh` (outside FakeTensorMode)."""
    from torch.distributed.tensor.parallel import parallelize_module  # noqa: PLC0415 - only for --parallel

    base, prefix = base_model(module)
    known = styles()
    out = PlanResult()
    applied: dict[str, Any] = {}
    for key, style in plan.items():
        if style not in known:
            out.notes.append(f"tensor-parallel style {style!r} of {prefix + key} has no plain torch equivalent: "
                             "left replicated")
            continue
        missing = unresolved_in(base, key, prefix)
        if missing:
            out.unresolved[prefix + key] = [{"module": m, "missing": rest}
                                            for m, rest in sorted({(pattern(p), rest) for p, rest in missing})]
        applied[key] = known[style]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            parallelize_module(base, mesh, applied)
        except Exception as exc:
            raise NpuportError("applying the tensor-parallel plan failed", "transformers' base_model_tp_plan to apply "
                               "with torch's parallelize_module", describe_exception(exc)) from None
    out.library_warnings = [f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught]
    out.applied = {prefix + k: plan[k] for k in applied if prefix + k not in out.unresolved}
    out.unsharded = unsharded(module, out.unresolved)
    return out


def unsharded(module: torch.nn.Module, unresolved: dict[str, list[dict[str, str]]]) -> list[dict[str, Any]]:
    """The parameters the plan left whole on every rank, per module pattern, largest first: those under a module a
    plan key could not resolve in, and any other module holding at least 1% of the weights (the embeddings and
    the head where the plan does not name them). Norms and biases the plan means to replicate stay out."""
    by: dict[str, dict[str, Any]] = {}
    total = 0
    types = {name: type(m).__name__ for name, m in module.named_modules()}
    for name, p in module.named_parameters():
        nbytes = p.numel() * p.element_size()  # a DTensor's numel is the global tensor's: counted as the whole model
        total += nbytes
        if hasattr(p, "_local_tensor"):
            continue
        owner = name.rpartition(".")[0]
        row = by.setdefault(pattern(owner) or "(root)", {"module": pattern(owner) or "(root)",
                                                         "type": types.get(owner, ""), "bytes": 0, "plan_keys": []})
        row["bytes"] += nbytes
    missed = [(hit["module"], k) for k, hits in unresolved.items() for hit in hits]
    out = []
    for pat, row in by.items():
        keys = sorted({k for m, k in missed if pat == m or pat.startswith(m + ".")})
        if keys or (total and row["bytes"] >= 0.01 * total):
            row["plan_keys"] = keys
            row["share"] = row["bytes"] / total if total else 0.0
            out.append(row)
    return sorted(out, key=lambda r: -r["bytes"])


def describe_unsharded(tp: int, result: PlanResult) -> list[str]:
    """The report's notes: the plan keys that did not resolve and the weights left whole on every rank."""
    notes = []
    where: dict[str, list[str]] = {}
    for hits in result.unresolved.values():
        for hit in hits:
            where.setdefault(hit["module"], []).append(hit["missing"])
    for mod, missing in where.items():
        notes.append(f"tp={tp}: the tensor-parallel plan names {', '.join(missing)} in {mod}, which has no such "
                     "submodule: not split there")
    rows = result.unsharded
    if rows:
        share = sum(r["share"] for r in rows)
        listed = ", ".join(f"{r['module']} ({r['type']}, {fmt_bytes(r['bytes'])})" for r in rows[:4])
        more = f" and {len(rows) - 4} more" if len(rows) > 4 else ""
        experts = any(r["module"].endswith("experts") or r["type"].endswith("Experts") for r in rows)
        notes.append(f"tp={tp}: {fmt_bytes(sum(r['bytes'] for r in rows))} ({share:.0%}) of the weights stay whole on every rank: {listed}{more}"
                     + ("; transformers splits experts by its expert-parallel plan (base_model_ep_plan), which "
                        "--parallel does not apply" if experts else ""))
    return notes
