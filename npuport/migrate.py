"""`npuport migrate`: the mechanical part of a CUDA -> NPU port, as a unified diff over the original text.

Only rewrites that cannot change meaning are made, each located by the AST and applied to the original text by
position (comments and formatting stay): device strings in device positions ("cuda:0" -> "npu:0"), `.cuda()`
-> `.npu()`, `.is_cuda` -> `.is_npu`, "nccl" -> "hccl" as a process-group backend, `torch.cuda.X` ->
`torch.npu.X` where torch.npu has X, `from torch.cuda.amp import ...` -> `from torch.npu.amp import ...`, and
`import torch_npu` after the torch import (it is what makes torch.npu exist). Everything else stays a diagnostic
of the source scan for a person to decide.
"""

from __future__ import annotations

import ast
import difflib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from npuport.errors import NpuportError
from npuport.rules.cuda_refs import Edit, Finder
from npuport.rules.source_scan import Diagnostic, parse_file, scan_text

IMPORT_LINE = "import torch_npu  # added by npuport migrate: registers the NPU backend and torch.npu\n"


@dataclass
class Migration:
    path: Path
    original: str
    migrated: str
    edits: list[Edit]
    added_import: bool
    remaining: list[Diagnostic] = field(default_factory=list)  # references a person still has to change

    @property
    def changed(self) -> bool:
        return self.migrated != self.original

    @property
    def diff(self) -> str:
        name = self.path.name
        return "".join(difflib.unified_diff(
            self.original.splitlines(keepends=True), self.migrated.splitlines(keepends=True),
            fromfile=f"a/{name}", tofile=f"b/{name}",
        ))

    def summary_line(self) -> str:
        manual = len(self.remaining)
        head = f"{len(self.edits)} mechanical change(s)" + (" + import torch_npu" if self.added_import else "")
        return f"{head}; {manual} reference(s) still need a hand change" + (" (see below)" if manual else "")


def _imports_torch_npu(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch_npu" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch_npu":
            return True
    return False


def _import_offset(text: str, tree: ast.Module) -> int:
    """Where `import torch_npu` goes: the line after the first top-level torch import, else after the module
    docstring and __future__ imports."""
    lines = text.splitlines(keepends=True)
    after = 0
    for node in tree.body:
        is_torch = (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names)) or (
            isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "torch")
        if is_torch:
            after = node.end_lineno
            break
    else:
        for node in tree.body:
            doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
            if not (doc or future):
                break
            after = node.end_lineno
    return sum(len(line) for line in lines[:after])


def _apply(text: str, edits: list[Edit]) -> str:
    out, last = [], 0
    for e in sorted(edits, key=lambda e: e.start):
        if e.start < last:
            raise AssertionError(f"overlapping migration edits at offset {e.start}")
        out.append(text[last:e.start])
        out.append(e.text)
        last = e.end
    out.append(text[last:])
    return "".join(out)


def migrate_file(path: Path | str) -> Migration:
    """The migrated text of one file (not written) with its diff and the references left for a person."""
    path = Path(path)
    text, tree = parse_file(path)
    finder = Finder(text, tree)
    refs = finder.run()
    edits = [e for r in refs for e in r.edits] + finder.import_edits()
    edits = sorted(set(edits), key=lambda e: e.start)
    added = bool(edits) and not _imports_torch_npu(tree)
    applied = list(edits)
    if added:
        at = _import_offset(text, tree)
        prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
        applied.append(Edit(at, at, prefix + IMPORT_LINE))
    migrated = _apply(text, applied)
    try:
        ast.parse(migrated)
    except SyntaxError as exc:  # a bug in an edit, never the user's fault
        raise AssertionError(f"migration of {path} produced invalid Python at line {exc.lineno}: {exc.msg}") from exc
    remaining = [d for d in scan_text(text, tree, path.name) if not d.migrate]
    return Migration(path=path, original=text, migrated=migrated, edits=edits, added_import=added, remaining=remaining)


def write_migration(m: Migration, force: bool = False) -> Path | None:
    """Write the migrated file after copying the original to <file>.bak; returns the backup (None: no change).

    Refuses to overwrite an existing backup unless `force`, so a second run never loses the real original.
    """
    if not m.changed:
        return None
    backup = m.path.with_name(m.path.name + ".bak")
    if backup.exists() and not force:
        raise NpuportError(f"backup {backup} already exists", "no earlier backup, or --force to replace it", str(backup))
    shutil.copy2(m.path, backup)
    m.path.write_text(m.migrated, encoding="utf-8")
    return backup
