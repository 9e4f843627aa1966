"""What every kernel's tiling shares: packing into the C struct the kernel reads, UB plans, core splits.

The Python tiling is the single source of truth: the kernel never derives a tile size itself, it reads the
packed struct. So the struct layout must match the C definition in the kernel source byte for byte; the
field list here is checked against the parsed C text by a test (`parse_c_struct`), which is why the kernel
structs use only fixed-width scalars and fixed-size arrays, ordered so that C inserts no padding.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Iterable

from npuport.cost.roofline import ChipProfile, load_chips
from npuport.errors import NpuportError

_CTYPES: dict[str, tuple[str, int]] = {
    "uint32_t": ("I", 4), "int32_t": ("i", 4), "float": ("f", 4),
    "uint64_t": ("Q", 8), "int64_t": ("q", 8),
}


# what the tilings and the performance model read of a chip's platform block (mappings/hardware.yaml, from CANN's
# platform_config .ini of that chip)
PLATFORM_KEYS = ("ub_size", "ubblock_size", "vec_calc_size", "vector_core_cnt", "cube_freq_mhz")


def platform_of(chip: ChipProfile) -> dict[str, Any]:
    """The chip's Ascend C platform numbers; a chip without them (a GPU, or an NPU whose CANN platform file is not
    in mappings/hardware.yaml) cannot be tiled for, and says so in one line."""
    p = chip.platform
    missing = [k for k in PLATFORM_KEYS if k not in p]
    if missing:
        with_block = ", ".join(_chips_with_platform()) or "none"
        raise NpuportError(f"the chip has no Ascend C platform numbers in mappings/hardware.yaml (missing "
                           f"{', '.join(missing)})", f"a chip with a platform block: {with_block}", chip.name)
    return p


def _chips_with_platform() -> list[str]:
    return [name for name, c in load_chips().items() if all(k in c.platform for k in PLATFORM_KEYS)]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def align_up(value: int, unit: int) -> int:
    return ceil_div(value, unit) * unit


def split_even(n: int, parts: int) -> tuple[int, int, int]:
    """Split n equal-cost items over at most `parts` cores: (base, rem, used).

    Core i < rem gets base + 1 items, the others base; start(i) = i * base + min(i, rem). The kernel
    evaluates the same formula, so only base / rem / used travel in the struct.
    """
    used = min(n, parts)
    if used == 0:
        return 0, 0, 0
    return n // used, n % used, used


def even_start(i: int, base: int, rem: int) -> int:
    return i * base + min(i, rem)


@dataclass(frozen=True)
class UbBuffer:
    """One TPipe buffer: `depth` copies (2 = double buffering) of `nbytes` each, 32-byte aligned."""

    name: str
    nbytes: int
    depth: int = 1


@dataclass(frozen=True)
class UbPlan:
    buffers: tuple[UbBuffer, ...]
    block: int  # ubblock_size: every buffer starts and ends on this boundary

    @property
    def total(self) -> int:
        return sum(align_up(b.nbytes, self.block) * b.depth for b in self.buffers)

    def offsets(self) -> dict[str, list[int]]:
        """Start address of each copy, in the order TPipe::InitBuffer hands them out."""
        out: dict[str, list[int]] = {}
        cursor = 0
        for b in self.buffers:
            out[b.name] = []
            for _ in range(b.depth):
                out[b.name].append(cursor)
                cursor += align_up(b.nbytes, self.block)
        return out

    def size(self, name: str) -> int:
        return next(b.nbytes for b in self.buffers if b.name == name)

    def fits(self, budget: int) -> bool:
        return self.total <= budget


class PackedTiling:
    """Mixin for frozen tiling dataclasses: `C_FIELDS` lists (field, ctype) in C declaration order."""

    C_STRUCT: ClassVar[str]
    C_FIELDS: ClassVar[tuple[tuple[str, str], ...]]

    @classmethod
    def struct_format(cls) -> str:
        fmt = "<"
        for _, ctype in cls.C_FIELDS:
            base, count = _split_array(ctype)
            fmt += (str(count) if count > 1 else "") + _CTYPES[base][0]
        return fmt

    def pack(self) -> bytes:
        values: list[Any] = []
        for name, ctype in self.C_FIELDS:
            value = getattr(self, name)
            _, count = _split_array(ctype)
            if count > 1:
                seq = list(value)
                if len(seq) > count:
                    raise NpuportError(f"{self.C_STRUCT}.{name} holds at most {count} entries", None, f"{len(seq)} entries")
                values.extend(seq + [0] * (count - len(seq)))
            else:
                values.append(value)
        return struct.pack(self.struct_format(), *values)

    @classmethod
    def python_fields(cls) -> list[str]:
        return [f.name for f in fields(cls)]  # type: ignore[arg-type]


def _split_array(ctype: str) -> tuple[str, int]:
    m = re.fullmatch(r"(\w+)\[(\d+)\]", ctype)
    return (m.group(1), int(m.group(2))) if m else (ctype, 1)


def parse_c_struct(source: str | Path, name: str) -> list[tuple[str, str]]:
    """(field, ctype) pairs of `struct name { ... };` in a C source; arrays as 'uint32_t[49]'.

    Array sizes may be a macro or constexpr defined in the same file (`#define X 48`, `constexpr ... X = 48;`).
    """
    text = Path(source).read_text() if isinstance(source, Path) else source
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    body = re.search(r"struct\s+" + re.escape(name) + r"\s*\{(.*?)\};", text, flags=re.S)
    if not body:
        raise NpuportError(f"struct {name} not found in kernel source", f"a 'struct {name} {{...}};' block")
    consts = dict(re.findall(r"#define\s+(\w+)\s+(\d+)", text))
    consts.update(re.findall(r"constexpr\s+\w+\s+(\w+)\s*=\s*(\d+)\s*;", text))
    out: list[tuple[str, str]] = []
    for decl in filter(None, (d.strip() for d in body.group(1).split(";"))):
        m = re.fullmatch(r"(\w+)\s+(\w+)\s*(?:\[([\w\s+*-]+)\])?", decl)
        if not m:
            raise NpuportError(f"cannot parse struct {name} member", "'<type> <name>[N]?;'", decl)
        ctype, field, size = m.groups()
        if size is not None:
            expr = re.sub(r"[A-Za-z_]\w*", lambda t: consts.get(t.group(0), "?"), size)
            if not re.fullmatch(r"[\d\s+*-]+", expr):
                raise NpuportError(f"struct {name}.{field}: array size is not a known constant", "N or CONST + N",
                                   size)
            ctype = f"{ctype}[{eval(expr)}]"  # digits and + - * only, checked above
        out.append((field, ctype))
    return out


def c_layout_has_padding(c_fields: Iterable[tuple[str, str]]) -> bool:
    """True if natural C alignment would insert padding anywhere (which '<' struct packing would not)."""
    offset = 0
    biggest = 1
    for _, ctype in c_fields:
        base, count = _split_array(ctype)
        size = _CTYPES[base][1]
        biggest = max(biggest, size)
        if offset % size:
            return True
        offset += size * count
    return offset % biggest != 0


def dtype_name(t: Any) -> str:
    """'float16' for torch.float16 (the dtype names the chip profile and constraints use)."""
    return str(getattr(t, "dtype", t)).removeprefix("torch.")
