"""Which of `npuport migrate`'s edits are right only together with the "cuda" device strings (mappings/migrate.yaml).

migrate rewrites the device strings of a program as one group or not at all. Some other edits read or decide the
device those strings name: `.cuda()` moves a tensor to the device whose type `x.device.type == "cuda"` tests, and
`torch.cuda.is_available()` picks the string in `"cuda" if torch.cuda.is_available() else "cpu"`. Made alone, such
an edit sends the program down another branch on the NPU, so while the strings are held back they are held back
too; and one that cannot be rewritten holds the strings back unless it raises without CUDA (`"npu" if
tc.is_available() else "cpu"` would run on the CPU exactly when an NPU is present: holds_strings). The same holds for every `torch.cuda` call whose answer or effect
depends on the device that is there: `torch.cuda.is_bf16_supported()` answers False on an NPU host where
`torch.npu.is_bf16_supported()` answers True, `torch.cuda.amp.GradScaler()` disables itself where torch.npu's does
not, `torch.cuda.synchronize()` stops the program where torch.npu's goes on. Each `torch.cuda` name migrate
rewrites is decided in mappings/migrate.yaml (held back: `coupled`; made: `independent`, the calls that are ignored
on both sides), and a name decided nowhere is an error at load, so a name added to source_apis.yaml is never
rewritten by default.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Mapping

from npuport.errors import MappingError
from npuport.mappings import load_checked
from npuport.scan.cuda_refs import Edit, Finder, Ref
from npuport.scan.source_apis import SourceApis, load_source_apis

FILE = "migrate.yaml"


@dataclass(frozen=True)
class Coupling:
    device_arguments: frozenset[str]  # dotted callees whose first argument is a device
    ids: Mapping[str, str]  # diagnostic id -> why its edit depends on the device strings
    cuda_names: Mapping[str, str]  # torch.cuda.<name> -> why
    independent: frozenset[str]  # torch.cuda.<name> whose rewrite is made while the strings are held back
    loud: frozenset[str] = frozenset()  # ids and names whose original raises where CUDA is absent (without_cuda)


@functools.lru_cache(maxsize=1)
def load_coupling() -> Coupling:
    data = load_checked(FILE)  # fields and types: schemas/migrate.schema.json
    apis = load_source_apis()
    for did in data["coupled"]["ids"]:
        if did not in apis.diagnostics:  # a typo would silently let that edit through while the strings are held
            raise MappingError(FILE, f"coupled.ids.{did}", "id", "not a diagnostic of source_apis.yaml")
    coupled, independent = data["coupled"]["cuda_names"], data["independent"]
    _check_decided(apis, set(data["coupled"]["ids"]), set(coupled), set(independent))
    return Coupling(
        device_arguments=frozenset(data["device_arguments"]),
        ids={k: v["why"] for k, v in data["coupled"]["ids"].items()},
        cuda_names={k: v["why"] for k, v in coupled.items()},
        independent=frozenset(independent),
        loud=frozenset(k for section in (data["coupled"]["ids"], coupled) for k, v in section.items()
                       if v.get("without_cuda") == "raises"),
    )


def _check_decided(apis: SourceApis, ids: set[str], coupled: set[str], independent: set[str]) -> None:
    """Every torch.cuda name migrate rewrites is decided once: by its group's id, or by name in exactly one of
    coupled.cuda_names and independent. A name decided nowhere would be rewritten while the strings are held."""
    groups = sorted({g for g in apis.groups.values() if apis.diagnostics[g].migrate} - ids)
    if groups:
        raise MappingError(FILE, f"coupled.ids.{groups[0]}", "id", "migrate rewrites the torch.cuda names of this "
                           "group (source_apis.yaml groups): say whether they are held back with the device strings")
    plain = apis.npu_names - set(apis.groups)  # a grouped name is decided by its group's id
    twice, unknown = sorted(coupled & independent), sorted((coupled | independent) - plain)
    if twice:
        raise MappingError(FILE, f"independent.{twice[0]}", "name", "also under coupled.cuda_names: decide it once")
    if unknown:
        raise MappingError(FILE, unknown[0], "name", "not a torch.cuda name migrate rewrites on its own "
                           "(source_apis.yaml npu_names, outside groups)")
    undecided = sorted(plain - coupled - independent)
    if undecided:
        raise MappingError(FILE, f"coupled.cuda_names.{undecided[0]}", "name", "migrate rewrites it (source_apis.yaml "
                           "npu_names) but it is under neither coupled.cuda_names nor independent")


def cuda_name(ref: Ref) -> str:
    """'is_available' for a reference to torch.cuda.is_available (its detail starts with the dotted name the scan
    resolved, aliases included)."""
    parts = ref.detail.split(" ", 1)[0].split(".")
    return parts[2] if parts[:2] == ["torch", "cuda"] and len(parts) > 2 else ""


_WHOLE_MODULE = "torch.cuda itself, passed on as a value: what the program calls on it is not followed"
_UNDECIDED = "not decided in mappings/migrate.yaml, so held back"


def coupled_reason(ref: Ref, coupling: Coupling | None = None) -> str | None:
    """Why `ref`'s edit depends on the device strings, or None when it does not."""
    c = coupling or load_coupling()
    if ref.id in c.ids:
        return c.ids[ref.id]
    if ref.id == "NPS001":
        return name_reason(cuda_name(ref), c)
    return None


def name_reason(name: str, coupling: Coupling | None = None) -> str | None:
    """Why rewriting torch.cuda.<name> depends on the device strings (None: it does not, or it is not rewritten)."""
    c = coupling or load_coupling()
    group = load_source_apis().groups.get(name)
    if group is not None:
        return c.ids.get(group)
    if not name:  # `mod = torch.cuda`
        return _WHOLE_MODULE
    return None if name in c.independent else c.cuda_names.get(name, _UNDECIDED)


def holds_strings(ref: Ref, coupling: Coupling | None = None) -> bool:
    """A coupled reference npuport cannot rewrite holds the device strings back unless its torch.cuda original raises
    where CUDA is absent: beside "npu" strings it would answer for a CUDA that is not there (`"npu" if
    tc.is_available() else "cpu"` runs on the CPU exactly when an NPU is present), silently; one that raises stops
    the program at a line listed as a hand change. Undecided (`without_cuda` not given): held, to be safe."""
    c = coupling or load_coupling()
    if not coupled_reason(ref, c):
        return False
    return (ref.id if ref.id in c.ids else cuda_name(ref)) not in c.loud


def coupled_import_edits(text: str, tree: ast.Module, edits: list[Edit],
                          coupling: Coupling | None = None) -> tuple[set[Edit], set[str]]:
    """The `from torch.cuda import is_available, ...` / `from torch.cuda.amp import GradScaler` rewrites among
    `edits` (they port the coupled names they bind), and every name those statements bind (held back with them)."""
    c = coupling or load_coupling()
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    held: set[Edit] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module
                and node.module.split(".")[:2] == ["torch", "cuda"]):
            continue
        sub = node.module.split(".")[2:3]  # `from torch.cuda.amp import ...`: decided as torch.cuda.amp
        if not any(name_reason(sub[0] if sub else a.name, c) for a in node.names):
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
