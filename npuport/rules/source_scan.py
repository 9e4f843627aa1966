"""Static scan of a model file and the local modules it imports for CUDA-specific code (`audit --static-only`).

Files are parsed with `ast`, never imported or executed. Imports are followed to files beside the model (or
inside its package); anything that does not resolve to such a file (torch, site-packages) is not scanned.
Each reference becomes a `Diagnostic` with a stable NPS id documented in docs/diagnostics/<ID>.md, its NPU
equivalent, and whether torch_npu's transfer_to_npu handles it automatically. The summary counts references the
way HIPIFY's --print-stats does: found, handled automatically, needing a manual change.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from npuport.errors import NpuportError
from npuport.rules.cuda_refs import Finder
from npuport.rules.source_apis import load_source_apis

MAX_FILES = 200


@dataclass
class Diagnostic:
    id: str
    level: str
    message: str
    file: str
    line: int
    col: int  # 1-based, in characters
    npu_equivalent: str
    auto: bool  # torch_npu.contrib.transfer_to_npu handles it at run time
    fix: str
    title: str = ""
    migrate: bool = False  # `npuport migrate` rewrites it mechanically

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ScanReport:
    files: list[str]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, Any]:
        found = len(self.diagnostics)
        auto = sum(1 for d in self.diagnostics if d.auto)
        by_id: dict[str, int] = {}
        for d in self.diagnostics:
            by_id[d.id] = by_id.get(d.id, 0) + 1
        return {
            "found": found,
            "handled_automatically": auto,
            "manual": found - auto,
            "migratable": sum(1 for d in self.diagnostics if d.migrate),
            "automatic_percent": round(100.0 * auto / found, 1) if found else 100.0,
            "by_id": dict(sorted(by_id.items())),
            "files": len(self.files),
        }

    def summary_line(self) -> str:
        s = self.summary
        return (f"{s['found']} CUDA reference(s) in {s['files']} file(s): {s['handled_automatically']} handled "
                f"automatically by transfer_to_npu ({s['automatic_percent']}%), {s['manual']} need a manual change, "
                f"{s['migratable']} rewritten by `npuport migrate`")

    def to_json(self) -> dict[str, Any]:
        return {"schema": "npuport.source_scan/1", "files": self.files, "summary": self.summary,
                "diagnostics": [d.to_json() for d in self.diagnostics], "notes": self.notes}


def parse_file(path: Path) -> tuple[str, ast.Module]:
    """Text and AST of a Python file; a missing or unparsable file is a user error."""
    if not path.is_file():
        raise NpuportError(f"cannot read {path}", "an existing Python file", str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NpuportError(f"cannot read {path}", "a UTF-8 Python file", str(exc)) from None
    try:
        return text, ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise NpuportError(f"{path} is not valid Python", "a file that parses", f"line {exc.lineno}: {exc.msg}") from None


def _module_file(base: Path, dotted: str) -> Path | None:
    target = base.joinpath(*dotted.split(".")) if dotted else base
    for candidate in (target.with_suffix(".py") if dotted else None, target / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _roots(path: Path) -> list[Path]:
    """Folders an absolute import may resolve from: the file's folder and the folder above its top package."""
    roots = [path.parent]
    d = path.parent
    while (d / "__init__.py").is_file() and d.parent != d:
        d = d.parent
        roots.append(d)
    return roots


def local_imports(path: Path, tree: ast.Module) -> list[Path]:
    """Files of the local modules `tree` imports (never site-packages: only paths beside the model)."""
    found: list[Path] = []
    roots = _roots(path)
    for node in ast.walk(tree):
        candidates: list[tuple[Path, str]] = []
        if isinstance(node, ast.Import):
            candidates = [(r, a.name) for a in node.names for r in roots]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                mod = node.module or ""
                candidates = [(base, mod)] + [(base, f"{mod}.{a.name}" if mod else a.name) for a in node.names]
            elif node.module:
                candidates = [(r, node.module) for r in roots] + [(r, f"{node.module}.{a.name}") for a in node.names for r in roots]
        for base, dotted in candidates:
            got = _module_file(base, dotted)
            if got is not None and "site-packages" not in got.parts and got.resolve() != path.resolve():
                found.append(got.resolve())
    return found


def _display(path: Path, anchor: Path) -> str:
    try:
        return str(path.relative_to(anchor))
    except ValueError:
        return str(path)


def scan_text(text: str, tree: ast.Module, display: str) -> list[Diagnostic]:
    apis = load_source_apis()
    out = []
    for ref in Finder(text, tree, apis).run():
        info = apis.diagnostics[ref.id]
        out.append(Diagnostic(
            id=ref.id, level=info.level, message=f"{info.title}: {ref.detail}", file=display, line=ref.line,
            col=ref.col, npu_equivalent=info.npu, auto=info.auto if ref.auto is None else ref.auto, fix=info.fix,
            title=info.title, migrate=ref.migrated,
        ))
    return out


def scan(model_file: Path | str) -> ScanReport:
    """Diagnostics for `model_file` and the local modules it imports, transitively (parsed, never executed)."""
    model_file = Path(model_file).resolve()
    text, tree = parse_file(model_file)
    anchor = model_file.parent
    report = ScanReport(files=[])
    todo: list[tuple[Path, str, ast.Module]] = [(model_file, text, tree)]
    seen = {model_file}
    while todo:
        path, text, tree = todo.pop(0)
        report.files.append(_display(path, anchor))
        report.diagnostics.extend(scan_text(text, tree, _display(path, anchor)))
        for dep in local_imports(path, tree):
            if dep in seen:
                continue
            seen.add(dep)
            if len(seen) > MAX_FILES:
                report.notes.append(f"stopped following imports after {MAX_FILES} files")
                break
            try:
                dep_text, dep_tree = parse_file(dep)
            except NpuportError as exc:
                report.notes.append(f"skipped {_display(dep, anchor)}: {exc.what}")
                continue
            todo.append((dep, dep_text, dep_tree))
    return report
