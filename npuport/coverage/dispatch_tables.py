"""PyTorch's own dispatch tables, read statically from torchgen/packaged/ATen/native/native_functions.yaml.

Used at sync time only (scripts/sync_torch_npu_coverage.py), so an audit never needs the paired torch installed.
The rules reproduce what torchgen registers (checked against the live dispatcher of torch 2.13: every overload
present in both agrees on CompositeImplicitAutograd / CompositeExplicitAutograd[NonFunctional] / CPU):

- no `dispatch:` and no `structured_delegate:` (and not manual_kernel_registration) -> CompositeImplicitAutograd;
  an explicit but empty `dispatch: {}` means no kernel at all;
- `dispatch:` keys may be comma-joined ('CPU, CUDA');
- `ufunc_inner_loop:` generates CPU and CUDA kernels;
- `structured_delegate: X.out` -> CompositeExplicitAutogradNonFunctional (calls X.out through the dispatcher)
  plus X.out's backend kernels;
- `autogen:` names get a CompositeExplicitAutograd kernel, except on CompositeImplicitAutograd-only ops, where
  torchgen generates nothing.

Views and metadata ops (no device kernel at all) come from the same file:
- a view is an overload with a `view_copy`-tagged twin `<name>_copy[.overload]`: torchgen's own definition of a
  view op (functionalization replaces each view by that twin); an `inplace_view`-tagged `X_` whose functional `X`
  returns an alias of its input (`t_`, `squeeze_`, `swapaxes_`; not `resize_` / `set_`, which touch storage);
- a metadata op is CompositeImplicitAutograd, takes tensors, returns only sizes / flags / dtypes (int, SymInt,
  bool, ScalarType ...) and is not tagged `data_dependent_output`: `size.int`, `numel`, `is_contiguous`, `dim`.

When the paired torch wheel cannot be had, `tables_from_documents` rebuilds the same tables from checked-in coverage
files of that torch release (what a file records about the torch side), leaving unknown only the category of ops
that every one of those files lists as registered by torch_npu.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml

from npuport.coverage.names import schema_name

CIA = "CompositeImplicitAutograd"
CEA = "CompositeExplicitAutograd"
CEANF = "CompositeExplicitAutogradNonFunctional"
_BACKEND_FROM_OUT = ("CPU", "CUDA", "Meta", "MPS", "XPU")
_META_TYPES = frozenset({"int", "SymInt", "bool", "SymBool", "ScalarType", "Layout", "Device", "MemoryFormat",
                         "int[]", "SymInt[]"})
# CompositeImplicitAutograd, returns a bool, yet reads the tensor's value (it calls item()): not metadata
_READS_VALUE = frozenset({"is_nonzero"})
_ALIAS_RETURN = re.compile(r"Tensor\([a-z]+\)(?!!)")


@dataclass
class TorchTables:
    """Dispatch keys per aten overload ('add.Tensor', bare default) and the structured delegates."""

    keys: dict[str, frozenset[str]] = field(default_factory=dict)
    structured_delegate: dict[str, str] = field(default_factory=dict)
    views: set[str] = field(default_factory=set)  # alias their input: no kernel, no data moved
    metadata: set[str] = field(default_factory=set)  # read sizes, strides, dtype on the host
    uncategorized: set[str] = field(default_factory=set)  # rebuilt from coverage files: category not recorded

    def category(self, name: str) -> str:
        """How PrivateUse1 runs an overload that torch_npu does not register itself.

        'implicit' (decomposes above autograd), 'delegate' (structured functional calling its out= variant),
        'explicit' (a composite kernel that also serves PrivateUse1), 'cpu' (only a CPU kernel: torch_npu's CPU
        fallback runs it), 'none' (no kernel usable by the fallback).
        """
        if name in self.uncategorized:
            raise KeyError(f"the dispatch category of {name} is not known")
        keys = self.keys[name]
        if CIA in keys:
            return "implicit"
        if name in self.structured_delegate:
            return "delegate"
        if CEA in keys or CEANF in keys:
            return "explicit"
        if "CPU" in keys:
            return "cpu"
        return "none"


def _tags(entry: Mapping[str, Any]) -> set[str]:
    tags = entry.get("tags") or []
    return {str(t).strip() for t in ([tags] if isinstance(tags, str) else tags) for t in str(t).split(",")}


def _returns(func: str) -> list[str]:
    """'size.int(Tensor self, int dim) -> int' -> ['int']; '-> (Tensor a, Tensor b)' -> ['Tensor', 'Tensor']."""
    text = func.rsplit("->", 1)[1].strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return [part.split()[0] for part in text.split(",") if part.strip()]


def _is_metadata(entry: Mapping[str, Any], name: str, own: set[str]) -> bool:
    func = str(entry["func"])
    returns = _returns(func)
    takes_tensor = "Tensor" in func.split("->", 1)[0]
    return (own == {CIA} and takes_tensor and bool(returns) and all(r in _META_TYPES for r in returns)
            and "data_dependent_output" not in _tags(entry) and name.split(".", 1)[0] not in _READS_VALUE)


def _views(entries: list[Mapping[str, Any]], names: set[str]) -> set[str]:
    views = set()
    for entry in entries:
        if "view_copy" in _tags(entry):
            base, dot, overload = schema_name(entry["func"]).partition(".")
            view = base.removesuffix("_copy") + dot + overload
            if base.endswith("_copy") and view in names:
                views.add(view)
    functional = {schema_name(e["func"]): str(e["func"]) for e in entries}
    for entry in entries:
        if "inplace_view" in _tags(entry):
            base, dot, overload = schema_name(entry["func"]).partition(".")
            twin = functional.get(base.removesuffix("_") + dot + overload, "")
            if twin and _ALIAS_RETURN.search(twin.rsplit("->", 1)[1]):
                views.add(base + dot + overload)
    return views


def parse_native_functions(text: bytes | str) -> TorchTables:
    """Parse native_functions.yaml content into TorchTables."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(text, Loader=loader)
    tables = TorchTables()
    keys: dict[str, set[str]] = {}
    for entry in entries:
        name = schema_name(entry["func"])
        own: set[str] = set()
        if "dispatch" in entry:
            for joined in (entry["dispatch"] or {}):
                own.update(k.strip() for k in str(joined).split(","))
        elif not entry.get("structured_delegate") and not entry.get("manual_kernel_registration"):
            own.add(CIA)
        if entry.get("ufunc_inner_loop"):
            own.update(("CPU", "CUDA"))
        if entry.get("structured_delegate"):
            tables.structured_delegate[name] = str(entry["structured_delegate"])
        keys.setdefault(name, set()).update(own)
        if _is_metadata(entry, name, own):
            tables.metadata.add(name)
        if own == {CIA}:
            continue
        for generated in str(entry.get("autogen") or "").split(","):
            generated = generated.strip()
            if generated:
                keys.setdefault(generated, set()).add(CEA)
    for functional, out in tables.structured_delegate.items():
        keys[functional] |= {CEANF} | {k for k in keys.get(out, ()) if k in _BACKEND_FROM_OUT}
    tables.keys = {name: frozenset(v) for name, v in keys.items()}
    tables.views = _views(entries, set(keys))
    return tables


_GROUP_KEYS = {"implicit": {CIA}, "explicit": {CEA}, "cpu": {"CPU"}, "none": set()}


def tables_from_documents(docs: Iterable[Mapping[str, Any]]) -> TorchTables:
    """The torch side of coverage documents (parsed torch_npu-<version>.yaml) of one torch release, as TorchTables.

    Each document records the category of every aten overload its torch_npu release does not register, the
    structured delegates of those, and which registered ones are CompositeImplicitAutograd. An overload registered
    in every document keeps an unknown category (`uncategorized`); `category()` raises for it.
    """
    tables = TorchTables()
    keys: dict[str, set[str]] = {}
    registered: set[str] = set()
    for doc in docs:
        bare = lambda op: str(op).split("::", 1)[1]  # noqa: E731
        for group, ops in doc["torch_tables"].items():
            for op in ops:
                keys[bare(op)] = set(_GROUP_KEYS[group])
        for op, out in doc["delegates"].items():
            tables.structured_delegate[bare(op)] = bare(out)
            keys[bare(op)] = {CEANF}
        for op in doc["native_composites"]:
            keys[bare(op)] = {CIA}
        registered.update(bare(op) for op in doc["native"])
        tables.views.update(bare(op) for op in doc.get("views") or ())
        tables.metadata.update(bare(op) for op in doc.get("metadata") or ())
    tables.uncategorized = registered - set(keys)
    for name in tables.uncategorized:
        keys[name] = set()
    tables.keys = {name: frozenset(v) for name, v in keys.items()}
    return tables


def fill_categories(tables: TorchTables, names: Iterable[str], other: TorchTables) -> tuple[TorchTables, list[str]]:
    """A copy of `tables` with the category of `names` (uncategorized there) taken from `other`, another torch
    release's tables, and the names `other` cannot categorize either."""
    filled = TorchTables(dict(tables.keys), dict(tables.structured_delegate), set(tables.views), set(tables.metadata),
                         set(tables.uncategorized))
    missing = []
    for name in names:
        if name not in other.keys or name in other.uncategorized:
            missing.append(name)
            continue
        filled.keys[name] = other.keys[name]
        if name in other.structured_delegate:
            filled.structured_delegate[name] = other.structured_delegate[name]
        filled.uncategorized.discard(name)
    return filled, missing
