"""The kernel registry: what each kernel replaces, where it fits, its reference and its performance model.

The fusion advisor reads `KERNELS[name].replaces` (fusion pattern ids) and calls `check_constraints` to see
whether a kernel fits a site the audit found; an empty list means it fits. Registration fails at import on a
duplicate name, an unknown pattern id or an unknown constraint field. Importing this module also registers
`torch.ops.npuport.<op>` (once per process, see torch_ops.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from npuport.ascendc_kernels import torch_ops
from npuport.ascendc_kernels.add_rms_norm.perf import add_rms_norm_perf
from npuport.ascendc_kernels.add_rms_norm.reference import (
    add_rms_norm_golden,
    add_rms_norm_reference,
    add_rms_norm_schedule,
)
from npuport.ascendc_kernels.flash_attention.perf import flash_attention_perf
from npuport.ascendc_kernels.flash_attention.reference import (
    flash_attention_golden,
    flash_attention_reference,
    flash_attention_schedule,
)
from npuport.ascendc_kernels.layer_norm.perf import layer_norm_perf
from npuport.ascendc_kernels.layer_norm.reference import layer_norm_golden, layer_norm_reference, layer_norm_schedule
from npuport.ascendc_kernels.rms_norm.perf import rms_norm_perf
from npuport.ascendc_kernels.rms_norm.reference import rms_norm_golden, rms_norm_reference, rms_norm_schedule
from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked

PATTERNS = ("rms_norm", "add_rms_norm", "layer_norm", "add_layer_norm", "attention")
HERE = Path(__file__).resolve().parent
VERIFIED = MappingProxyType({
    "tiling": "CPU, here (exhaustive shape grids)",
    "schedule": "CPU, here (vs float64 golden)",
    "compile": "only where CANN is installed (not here)",
    "npu numerics": "not yet (run the `npu` tests on an Ascend machine)",
})


@dataclass(frozen=True)
class Constraints:
    """Where the compiled kernel applies (mappings/kernels.yaml). None = no limit. Checked by `check_constraints`."""

    dtypes: tuple[str, ...]
    chips: tuple[str, ...]
    param_dtypes: tuple[str, ...] | None = None  # gamma / beta
    max_hidden: int | None = None
    max_head_dim: int | None = None
    head_dim_multiple: int | None = None
    layouts: tuple[str, ...] | None = None
    mask_kinds: tuple[str, ...] | None = None
    gqa: bool = False
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, (), False)}


@dataclass(frozen=True)
class KernelSpec:
    name: str
    op: str  # torch.ops qualname, 'npuport::rms_norm'
    replaces: tuple[str, ...]
    constraints: Constraints
    reference: Callable[..., Any]  # the PyTorch baseline (CPU / CUDA dispatch)
    perf_model: Callable[..., Any]
    schedule: Callable[..., Any]  # walks the kernel's tiles in its precision
    golden: Callable[..., Any]  # float64
    source: Path  # the Ascend C kernel
    verified: Mapping[str, str] = field(default_factory=lambda: VERIFIED)


def kernel_constraints(name: str) -> Constraints:
    """The constraints of kernel `name` from mappings/kernels.yaml (schemas/kernels.schema.json)."""
    raw = load_checked("kernels.yaml")["kernels"].get(name)
    if raw is None:
        raise MappingError("kernels.yaml", "kernels", name, "missing: every registered kernel needs its constraints here")
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k != "source"}
    return Constraints(**fields)


_SPECS = (
    KernelSpec("rms_norm", "npuport::rms_norm", ("rms_norm",), kernel_constraints("rms_norm"),
        rms_norm_reference, rms_norm_perf, rms_norm_schedule, rms_norm_golden, HERE / "rms_norm" / "kernel.asc"),
    KernelSpec("add_rms_norm", "npuport::add_rms_norm", ("add_rms_norm",), kernel_constraints("add_rms_norm"),
        add_rms_norm_reference, add_rms_norm_perf, add_rms_norm_schedule, add_rms_norm_golden,
        HERE / "add_rms_norm" / "kernel.asc"),
    KernelSpec("layer_norm", "npuport::layer_norm", ("layer_norm", "add_layer_norm"), kernel_constraints("layer_norm"),
        layer_norm_reference, layer_norm_perf, layer_norm_schedule, layer_norm_golden,
        HERE / "layer_norm" / "kernel.asc"),
    KernelSpec("flash_attention", "npuport::flash_attention", ("attention",), kernel_constraints("flash_attention"),
        flash_attention_reference, flash_attention_perf, flash_attention_schedule, flash_attention_golden,
        HERE / "flash_attention" / "kernel.asc"),
)


def _build(specs: tuple[KernelSpec, ...]) -> Mapping[str, KernelSpec]:
    table: dict[str, KernelSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise NpuportError(f"kernel {spec.name!r} registered twice", "unique kernel names", spec.op)
        unknown = set(spec.replaces) - set(PATTERNS)
        if unknown:
            raise NpuportError(f"kernel {spec.name!r} replaces unknown patterns", ", ".join(PATTERNS),
                               ", ".join(sorted(unknown)))
        if spec.op != f"npuport::{spec.name}":
            raise NpuportError(f"kernel {spec.name!r} has a mismatched op name", f"npuport::{spec.name}", spec.op)
        table[spec.name] = spec
    return MappingProxyType(table)


KERNELS: Mapping[str, KernelSpec] = _build(_SPECS)
torch_ops.ensure_registered()

_SHAPE_KEYS = {"hidden", "head_dim", "layout", "mask", "heads_q", "heads_kv", "param_dtype"}


def get_kernel(name: str) -> KernelSpec:
    if name not in KERNELS:
        raise NpuportError(f"unknown kernel {name!r}", "one of " + ", ".join(KERNELS), name)
    return KERNELS[name]


def check_constraints(name: str, *, dtype: str, chip: str, **shape: Any) -> list[str]:
    """Violated constraints of kernel `name` for one call site; [] = the compiled kernel fits.

    shape keys: hidden, head_dim, layout ('BNSD'|'BSND'), mask ('none'|'causal'|'bool'|'additive'),
    heads_q, heads_kv, param_dtype. Unknown keys raise (a typo must not read as 'fits').
    """
    c = get_kernel(name).constraints
    unknown = set(shape) - _SHAPE_KEYS
    if unknown:
        raise NpuportError(f"check_constraints({name!r}): unknown shape keys", ", ".join(sorted(_SHAPE_KEYS)),
                           ", ".join(sorted(unknown)))
    dtype = dtype.removeprefix("torch.")
    out: list[str] = []
    if dtype not in c.dtypes:
        out.append(f"dtype {dtype} not in {list(c.dtypes)}")
    if chip.lower() not in {x.lower() for x in c.chips}:
        out.append(f"chip {chip} not in {list(c.chips)} (kernel compiled for dav-2201 only)")
    pd = shape.get("param_dtype")
    if pd is not None and c.param_dtypes is not None and pd.removeprefix("torch.") not in c.param_dtypes:
        out.append(f"param dtype {pd} not in {list(c.param_dtypes)}")
    hd = shape.get("head_dim")
    if hd is not None and c.max_head_dim is not None and hd > c.max_head_dim:
        out.append(f"head_dim {hd} > {c.max_head_dim}")
    if hd is not None and c.head_dim_multiple and hd % c.head_dim_multiple:
        out.append(f"head_dim {hd} not a multiple of {c.head_dim_multiple}")
    if c.max_hidden is not None and shape.get("hidden", 0) > c.max_hidden:
        out.append(f"hidden {shape['hidden']} > {c.max_hidden}")
    lay = shape.get("layout")
    if lay is not None and c.layouts is not None and lay not in c.layouts:
        out.append(f"layout {lay} not in {list(c.layouts)}")
    mk = shape.get("mask")
    if mk is not None and c.mask_kinds is not None and mk not in c.mask_kinds:
        out.append(f"mask {mk} not in {list(c.mask_kinds)}")
    hq, hkv = shape.get("heads_q"), shape.get("heads_kv")
    if hq is not None and hkv is not None and (hkv == 0 or hq % hkv or (hq != hkv and not c.gqa)):
        out.append(f"heads_q {hq} / heads_kv {hkv} is not a supported grouping")
    return out
