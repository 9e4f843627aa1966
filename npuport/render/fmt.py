"""Number formatting shared by the text, markdown, csv and html renderers."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def fmt_time(seconds: float) -> str:
    if seconds <= 0:
        return "0"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def fmt_si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units, one decimal, the largest unit that keeps the number at 0.1 or more ('12.6 GiB',
    '0.5 GiB', '64.0 KiB'; under 1 KiB in bytes): a small buffer does not read as '0.0 GiB'."""
    for unit, size, least in (("GiB", 2**30, 2**30 / 10), ("MiB", 2**20, 2**20 / 10), ("KiB", 2**10, 2**10)):
        if abs(n) >= least:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def fmt_share(share: float) -> str:
    if share <= 0:
        return "0%"
    if share < 0.001:
        return "<0.1%"
    return f"{share * 100:.1f}%"


def fmt_count(n: int) -> str:
    return f"{n:,}"


def short_source(source: str) -> str:
    """'/long/path/transformers/models/llama/modeling_llama.py:244' -> 'modeling_llama.py:244'."""
    return source.rsplit("/", 1)[-1]


def add_row(table: Table, *cells: object) -> None:
    """Add a row whose strings are shown literally: model text like '[gate, up]' is not rich markup."""
    table.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def short_kernel_name(name: str, width: int = 60) -> str:
    """A device kernel's name without its C++ signature (a CUDA kernel's template arguments and parameters, its
    anonymous namespaces), cut to `width`: 'void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>(...)'
    -> 'at::native::CatArrayBatchedCopy'."""
    short = name.replace("(anonymous namespace)::", "").split("(")[0].split("<")[0].removeprefix("void ").strip() or name
    return short if len(short) <= width else short[: width - 1] + "…"
