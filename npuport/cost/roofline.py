"""Chip profiles (from mappings/hardware.yaml) and the roofline estimate of one op's time.

time = max(flops / peak(unit, dtype), bytes / bandwidth): a lower bound that says which resource an op is
bound by. Matrix ops use the cube / tensor-core peak of their dtype; everything else the vector peak.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked

Bound = Literal["compute", "memory", "none"]
_FILE = "hardware.yaml"


@dataclass(frozen=True)
class ChipProfile:
    name: str
    vendor: str
    family: str  # "npu" | "cuda"
    description: str
    matrix_peak: dict[str, float]  # FLOP/s per dtype name
    vector_peak: float  # FLOP/s
    memory_bandwidth: float  # bytes/s
    platform: dict[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    no_bf16: bool = False
    source: str = ""

    def peak_flops(self, dtype: str, matrix: bool) -> float:
        """Peak FLOP/s for `dtype`; dtypes without a figure fall back to the slowest listed matrix rate."""
        if not matrix:
            return self.vector_peak
        if dtype in self.matrix_peak:
            return self.matrix_peak[dtype]
        if dtype in ("bfloat16",) and "float16" in self.matrix_peak:
            return self.matrix_peak["float16"]
        return min(self.matrix_peak.values())

    def roofline(self, flops: float, bytes_moved: float, dtype: str, matrix: bool) -> tuple[float, Bound]:
        compute_s = flops / self.peak_flops(dtype, matrix) if flops else 0.0
        memory_s = bytes_moved / self.memory_bandwidth if bytes_moved else 0.0
        if compute_s == 0.0 and memory_s == 0.0:
            return 0.0, "none"
        return (compute_s, "compute") if compute_s >= memory_s else (memory_s, "memory")


def _derive(name: str, spec: Any, platform: dict[str, Any], what: str) -> float:
    if isinstance(spec, (int, float)):
        return float(spec)
    if not isinstance(spec, dict) or "derive" not in spec:
        raise MappingError(_FILE, name, what, "expected a number or {derive: ...}")
    p = platform
    freq = p["cube_freq_mhz"] * 1e6
    kind = spec["derive"]
    if kind == "cube":
        value = p["ai_core_cnt"] * p["cube_m"] * p["cube_n"] * p["cube_k"] * 2 * freq
    elif kind == "vector":
        value = p["vector_core_cnt"] * p["vec_calc_size"] * freq
    elif kind == "ddr_rate":
        value = p["ddr_rate_bytes_per_cycle_per_core"] * p["ai_core_cnt"] * freq
    else:
        raise MappingError(_FILE, name, what, f"unknown derivation {kind!r}")
    return value * float(spec.get("scale", 1.0))


@functools.lru_cache(maxsize=1)
def load_chips() -> dict[str, ChipProfile]:
    data = load_checked(_FILE)  # fields and types: schemas/hardware.schema.json
    chips: dict[str, ChipProfile] = {}
    for name, raw in data["chips"].items():
        platform = raw.get("platform", {})
        assumptions = []
        matrix = {}
        for dtype, spec in raw.get("matrix_peak", {}).items():
            matrix[dtype] = _derive(name, spec, platform, f"matrix_peak.{dtype}")
            if isinstance(spec, dict) and spec.get("confidence") == "assumed":
                assumptions.append(f"{dtype} matrix peak is assumed: {spec.get('source', '')}".strip())
        for dtype, note in raw.get("matrix_peak_notes", {}).items():
            assumptions.append(f"{dtype} matrix peak: {note}")
        vec = raw.get("vector_peak")
        if isinstance(vec, dict) and vec.get("confidence") == "assumed" or "vector_peak_source" in raw:
            assumptions.append("vector peak is an estimate")
        chips[name] = ChipProfile(
            name=name,
            vendor=raw["vendor"],
            family=raw["family"],
            description=raw["description"],
            matrix_peak=matrix,
            vector_peak=_derive(name, vec, platform, "vector_peak"),
            memory_bandwidth=_derive(name, raw["memory_bandwidth"], platform, "memory_bandwidth"),
            platform=dict(platform),
            assumptions=tuple(assumptions),
            no_bf16=bool(raw.get("no_bf16", False)),
            source=raw["source"],
        )
    default = data["default_target"]["chip"]
    if default not in chips:
        raise MappingError(_FILE, "default_target", "chip", f"{default!r} is not under chips")
    baseline = data["default_baseline"]["chip"]
    if baseline not in chips or chips[baseline].family != "cuda":
        raise MappingError(_FILE, "default_baseline", "chip", f"{baseline!r} is not a chip with family cuda")
    npu = [n for n, c in chips.items() if c.family == "npu"]
    for chip in data["npu_chips"]["chips"]:
        if chip not in npu:
            raise MappingError(_FILE, "npu_chips", "chips", f"{chip!r} is not a chip with family npu")
    missing = [n for n in npu if n not in data["npu_chips"]["chips"]]
    if missing:
        raise MappingError(_FILE, "npu_chips", "chips", f"chips with family npu missing here: {', '.join(missing)}")
    return chips


def default_chip() -> str:
    """The chip a command targets when none is given (hardware.yaml `default_target`)."""
    load_chips()  # the cross-references are checked there
    return str(load_checked(_FILE)["default_target"]["chip"])


def default_baseline() -> str:
    """The CUDA chip a migration comes from when none is given (hardware.yaml `default_baseline`)."""
    load_chips()
    return str(load_checked(_FILE)["default_baseline"]["chip"])


def npu_chips() -> tuple[str, ...]:
    """The Ascend NPU chips behaviour rules describe, in order (hardware.yaml `npu_chips`)."""
    load_chips()
    return tuple(load_checked(_FILE)["npu_chips"]["chips"])


def get_chip(name: str) -> ChipProfile:
    chips = load_chips()
    if name in chips:
        return chips[name]
    lowered = {k.lower(): v for k, v in chips.items()}
    if name.lower() in lowered:
        return lowered[name.lower()]
    for base in chips:  # a capacity variant the memory-fit table lists, not a chip of its own
        if name.lower() in (v.lower() for v in _variants(base)):
            raise NpuportError(f"{name} is a memory variant of {base} (its capacity is in the memory-fit table), not a "
                               "chip --chip knows the speed of", f"--chip {base}, or one of " + ", ".join(chips), name)
    raise NpuportError(f"unknown chip {name!r}", "one of " + ", ".join(chips), name)


def get_baseline_chip(name: str) -> ChipProfile:
    """--from-chip: a chip hardware.yaml knows, and a CUDA GPU (the run the migration starts from)."""
    chip = get_chip(name)
    if chip.family != "cuda":
        raise NpuportError(f"--from-chip {name} is not a CUDA GPU", "the CUDA chip the model comes from: "
                           + ", ".join(n for n, p in load_chips().items() if p.family == "cuda"), name)
    return chip


def _variants(base: str) -> list[str]:
    raw = load_checked(_FILE)["chips"].get(base) or {}
    return list((raw.get("memory") or {}).get("variants") or {})
