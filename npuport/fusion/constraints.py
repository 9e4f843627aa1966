"""Check a replacement's constraints (mappings/fusions.yaml) against what the model really does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npuport import coverage
from npuport.ascendc_kernels import registry
from npuport.fusion.patterns import Replacement


@dataclass(frozen=True)
class Facts:
    """What a match looks like on the target: dtype, shapes and mask as recorded; chip and torch_npu chosen."""

    dtype: str
    chip: str
    torch_npu: str | None
    rank: int | None = None
    head_dim: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    batch: int | None = None
    mask: str | None = None  # none | bool | float
    hidden: int | None = None  # normalized size for norm kernels


def _custom_op_exists(op: str, version: str | None) -> bool | None:
    try:
        return coverage.custom_op_schema(op, version) is not None
    except Exception:  # noqa: BLE001 - missing coverage data must not break the advice
        return None


def _kernel_violations(kernel: str, f: Facts) -> list[str] | None:
    if kernel not in registry.KERNELS:
        return [f"npuport kernel {kernel!r} is not in the registry"]
    mask = {"float": "additive"}.get(f.mask or "", f.mask)
    shape: dict[str, Any] = {k: v for k, v in (("head_dim", f.head_dim), ("heads_q", f.heads), ("heads_kv", f.kv_heads),
                                               ("mask", mask), ("hidden", f.hidden)) if v is not None}
    return list(registry.check_constraints(kernel, dtype=f.dtype, chip=f.chip, **shape))


def violations(rep: Replacement, f: Facts) -> list[str]:
    """Every constraint the match breaks; empty when the replacement fits."""
    out: list[str] = []
    c = rep.constraints
    if rep.kind == "npuport_kernel" and rep.kernel:
        found = _kernel_violations(rep.kernel, f)
        if found is None:
            return ["npuport kernel registry is not available"]
        return found
    if "dtypes" in c and f.dtype not in c["dtypes"]:
        out.append(f"dtype {f.dtype} not in {c['dtypes']}")
    if "chips" in c and f.chip not in c["chips"]:
        out.append(f"not available on {f.chip} (documented for {', '.join(c['chips'])})")
    if f.dtype == "bfloat16" and "bf16_chips" in c and f.chip not in c["bf16_chips"]:
        out.append(f"no bfloat16 on {f.chip}")
    if "rank" in c and f.rank is not None and f.rank != c["rank"]:
        out.append(f"needs {c['rank']}-D input, got {f.rank}-D")
    if f.head_dim is not None:
        if "head_dim_max" in c and f.head_dim > c["head_dim_max"]:
            out.append(f"head dim {f.head_dim} > {c['head_dim_max']}")
        if c.get("head_dim_even") and f.head_dim % 2:
            out.append(f"head dim {f.head_dim} is odd")
        if "head_dims" in c and f.head_dim not in c["head_dims"]:
            out.append(f"head dim {f.head_dim} not in {c['head_dims']}")
    if f.heads is not None and "heads_max" in c and f.heads > c["heads_max"]:
        out.append(f"{f.heads} query heads > {c['heads_max']}")
    if c.get("gqa_divisible") and f.heads and f.kv_heads and f.heads % f.kv_heads:
        out.append(f"{f.heads} query heads not a multiple of {f.kv_heads} KV heads")
    if "mask" in c and f.mask is not None and f.mask not in c["mask"]:
        out.append(f"{f.mask} attention mask (the fused path takes {' or '.join(c['mask'])})")
    if rep.kind == "torch_npu":
        exists = _custom_op_exists(rep.op, f.torch_npu)
        if exists is False:
            out.append(f"{rep.op} is not in torch_npu {f.torch_npu or '(newest)'}")
    return out
