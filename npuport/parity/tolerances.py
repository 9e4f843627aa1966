"""Dtype-aware tolerances from mappings/tolerances.yaml (see the file's header for what each field means; schema:
schemas/tolerances.schema.json)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from npuport.mappings import load_checked

FILE = "tolerances.yaml"
INTEGER = "integer"


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    rtol: float
    atol: float
    rel_l2: float
    cosine: float
    k: float
    floor: float
    op_rel_l2: float
    source: str

    def to_json(self) -> dict[str, float | str]:
        return {"rtol": self.rtol, "atol": self.atol, "rel_l2": self.rel_l2, "cosine": self.cosine, "k": self.k,
                "floor": self.floor, "op_rel_l2": self.op_rel_l2}


@dataclass(frozen=True)
class Tolerances:
    by_dtype: dict[str, Tolerance]
    stats_k_factor: float
    nondeterministic: dict[str, tuple[str, ...]]
    tf32: bool = False  # float32 entries use the float32-tf32 row

    def key_for(self, dtype: str) -> str:
        if dtype.startswith(("int", "uint")) or dtype == "bool":
            return INTEGER
        if dtype == "float32" and self.tf32:
            return "float32-tf32"
        return dtype if dtype in self.by_dtype else "float32"

    def for_dtype(self, dtype: str) -> Tolerance:
        return self.by_dtype[self.key_for(dtype)]

    def with_overrides(self, k: float | None = None, rel_l2: float | None = None, tf32: bool | None = None) -> "Tolerances":
        """`--k` / `--rel-l2` from the command line replace the file's value for every floating dtype."""
        rows = {}
        for name, tol in self.by_dtype.items():
            if name != INTEGER:
                tol = replace(tol, k=k if k is not None else tol.k, rel_l2=rel_l2 if rel_l2 is not None else tol.rel_l2)
            rows[name] = tol
        return replace(self, by_dtype=rows, tf32=self.tf32 if tf32 is None else tf32)


@functools.lru_cache(maxsize=4)
def _load(_: str = FILE) -> Tolerances:
    data = load_checked(FILE)  # fields, types and the dtype rows every run needs: schemas/tolerances.schema.json
    rows: dict[str, Tolerance] = {}
    for name, row in data["dtypes"].items():
        fields: dict[str, Any] = {k: (float(v) if k != "source" else v) for k, v in row.items()}
        rows[name] = Tolerance(dtype=name, **fields)
    nd = data.get("nondeterministic_ops") or {}
    lists = {k: tuple(v) for k, v in nd.items() if k != "source"}
    return Tolerances(rows, float(data.get("stats_k_factor", 1.0)), lists)


def load_tolerances() -> Tolerances:
    return _load()
