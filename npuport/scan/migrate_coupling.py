"""Which of `npuport migrate`'s edits are right only together with the "cuda" device strings (mappings/migrate.yaml).

migrate rewrites the device strings of a program as one group or not at all. Some other edits read or decide the
device those strings name: `.cuda()` moves a tensor to the device whose type `x.device.type == "cuda"` tests, and
`torch.cuda.is_available()` picks the string in `"cuda" if torch.cuda.is_available() else "cpu"`. Made alone, such
an edit sends the program down another branch on the NPU, so while the strings are held back they are held back
too; and one that cannot be rewritten holds the strings back (`"npu" if tc.is_available() else "cpu"` would run
on the CPU exactly when an NPU is present).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Mapping

from npuport.errors import MappingError
from npuport.mappings import load_checked
from npuport.scan.cuda_refs import Edit, Finder, Ref
from npuport.scan.source_apis import load_source_apis

FILE = "migrate.yaml"


@dataclass(frozen=True)
class Coupling:
    device_arguments: frozenset[str]  # dotted callees whose first argument is a device
    ids: Mapping[str, str]  # diagnostic id -> why its edit depends on the device strings
    cuda_names: Mapping[str, str]  # torch.cuda.<name> -> why


@functools.lru_cache(maxsize=1)
def load_coupling() -> Coupling:
    data = load_checked(FILE)  # fields and types: schemas/migrate.schema.json
    known = load_source_apis().diagnostics
    for did in data["coupled"]["ids"]:
        if did not in known:  # a typo would silently let that edit through while the strings are held
            raise MappingError(FILE, f"coupled.ids.{did}", "id", "not a diagnostic of source_apis.yaml")
    return Coupling(
        device_arguments=frozenset(data["device_arguments"]),
        ids={k: v["why"] for k, v in data["coupled"]["ids"].items()},
        cuda_names={k: v["why"] for k, v in data["coupled"]["cuda_names"].items()},
    )


def cuda_name(ref: Ref) -> str:
    """'is_available' for a reference to torch.cuda.is_available (its detail starts with the dotted name the scan
    resolved, aliases included)."""
    parts = ref.detail.split(" ", 1)[0].split(".")
    return parts[2] if parts[:2] == ["torch", "cuda"] and len(parts) > 2 else ""


def coupled_reason(ref: Ref, coupling: Coupling | None = None) -> str | None:
    """Why `ref`'s edit depends on the device strings, or None when it does not."""
    c = coupling or load_coupling()
    if ref.id in c.ids:
        return c.ids[ref.id]
    if ref.id == "NPS001":
        return c.cuda_names.get(cuda_name(ref))
    return None


def coupled_import_edits(text: str, tree: ast.Module, edits: list[Edit],
                          coupling: Coupling | None = None) -> tuple[set[Edit], set[str]]:
    """The `from torch.cuda import is_available, ...` rewrites among `edits` (they port the coupled names they bind),
    and every name those statements bind (held back with them)."""
    c = coupling or load_coupling()
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    held: set[Edit] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module == "torch.cuda"):
            continue
        if not any(a.name in c.cuda_names for a in node.names):
            continue
        lo, hi = starts[node.lineno - 1], starts[min(node.end_lineno or node.lineno, len(starts) - 1)]
        held.update(e for e in edits if lo <= e.start < hi)
        names.update(a.name for a in node.names)
    return held, names


class ProgramFinder(Finder):
    """The source scan's Finder, plus the device arguments of mappings/migrate.yaml: a "cuda" there is a device
    string of the group, not a use npuport cannot follow (which would hold back every device string)."""

    def _device_position(self, node: ast.AST) -> tuple[bool, bool]:
        found = super()._device_position(node)
        if found[0]:
            return found
        child, p = node, self.parent.get(id(node))
        while isinstance(p, (ast.IfExp, ast.BoolOp)) and not (isinstance(p, ast.IfExp) and p.test is child):
            child, p = p, self.parent.get(id(p))  # `set_default_device("cuda" if ok else "cpu")`, as the scan does
        if isinstance(p, ast.Call) and p.args and p.args[0] is child and self.dotted(p.func) in load_coupling().device_arguments:
            return True, False  # transfer_to_npu does not rewrite these at run time
        return found
