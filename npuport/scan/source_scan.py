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
from typing import Any, cast

from npuport.errors import NpuportError
from npuport.scan.cuda_refs import Finder, Ref
from npuport.scan.source_apis import load_source_apis

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


def _static_path(node: ast.AST, path: Path, env: dict[str, Path]) -> Path | None:
    """The folder an expression names, when it is built from literals and __file__ only:
    "lib", os.path.dirname(__file__), os.path.join(..., "x"), Path(__file__).parent.parent.resolve(),
    Path(...) / "x", str(...), os.path.abspath(...), or a module-level name bound to one of these."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        p = Path(node.value)
        return p if p.is_absolute() else (path.parent / p)
    if isinstance(node, ast.Name):
        if node.id == "__file__":
            return path
        return env.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _static_path(node.value, path, env)
        return inner.parent if inner is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _static_path(node.left, path, env), node.right
        if left is not None and isinstance(right, ast.Constant) and isinstance(right.value, str):
            return left / right.value
        return None
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("resolve", "absolute") and isinstance(func, ast.Attribute) and not node.args:
            return _static_path(func.value, path, env)
        args = [_static_path(a, path, env) if not (isinstance(a, ast.Constant) and name == "join") else None for a in node.args]
        if name in ("str", "Path", "PurePath", "abspath", "realpath", "normpath", "expanduser") and len(node.args) == 1:
            return args[0]
        if name == "dirname" and len(node.args) == 1 and args[0] is not None:
            return args[0].parent
        if name == "join" and node.args:
            base = _static_path(node.args[0], path, env)
            rest = node.args[1:]
            if base is None or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in rest):
                return None
            return base.joinpath(*[a.value for a in rest])  # type: ignore[attr-defined]  # `rest` holds str Constants only (checked above)
    return None


def syspath_roots(path: Path, tree: ast.Module) -> list[Path]:
    """Folders the module adds with sys.path.append / insert (as far as they are built from literals and __file__):
    `wd = Path(__file__).parent.parent.resolve(); sys.path.append(str(wd))` makes `lit_gpt` importable."""
    env: dict[str, Path] = {}
    roots: list[Path] = []
    node: ast.AST
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            got = _static_path(node.value, path, env)
            if got is not None:
                env[node.targets[0].id] = got
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "insert")):
            continue
        target = node.func.value
        if not (isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name) and target.value.id == "sys"):
            continue
        arg = node.args[-1] if node.args else None
        got = _static_path(arg, path, env) if arg is not None else None
        if got is not None and got.is_dir():
            roots.append(got.resolve())
    return roots


def local_imports(path: Path, tree: ast.Module, extra_roots: list[Path] | None = None) -> list[Path]:
    """Files of the local modules `tree` imports (never site-packages: only paths beside the model, in its package's
    parents, or in folders the module puts on sys.path)."""
    found: list[Path] = []
    roots = _roots(path) + syspath_roots(path, tree) + list(extra_roots or [])
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


# diagnostics that make a module CUDA-only: its callers in the same program get NPS077
CUDA_ONLY_IDS = frozenset({"NPS060", "NPS061", "NPS070", "NPS071", "NPS072", "NPS073", "NPS074", "NPS075", "NPS076",
                           "NPS091", "NPS092"})


def cuda_only_modules(files: list[tuple[Path, ast.Module, list[Ref]]], roots: list[Path]) -> dict[str, str]:
    """{name as importers write it: what it holds} for the CUDA-only code of the program's own modules.

    A module with CUDA-only references is listed under its names (stem, dotted path below each root), which flags
    `import helpers` / `from pkg import layers`. Inside it, a top-level function or class is listed as
    `module.Name` when its own body holds such a reference or launches one of the module's Triton kernels, and so
    is a top-level name assigned from one (`ext = load_inline(...)`): their importers' uses are lines a port
    changes. Classes count only when they are autograd Functions (a kernel's forward / backward); an nn.Module
    that uses such code internally is ported inside its module, its callers do not change.
    """
    out: dict[str, str] = {}
    for path, tree, refs in files:
        hits = [r for r in refs if r.id in CUDA_ONLY_IDS]
        if not hits:
            continue
        ids = sorted({r.id for r in hits})
        what = f"{path.name} holds CUDA-only code ({', '.join(ids)})"
        names = _module_names(path, roots)
        for n in names:
            out[n] = what
        lines = {r.line for r in hits}
        kernels = {d.name for d in tree.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and any(r.line in range(dec.lineno, cast(int, dec.end_lineno) + 1) for dec in d.decorator_list for r in hits)}
        # functions that call the module's other CUDA-only functions are CUDA-only too (to a fixed point)
        funcs = {d.name: d for d in tree.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))}
        direct = {n for n, d in funcs.items() if any(d.lineno <= ln <= cast(int, d.end_lineno) for ln in lines)} | kernels
        changed = True
        while changed:
            changed = False
            for n, d in funcs.items():
                if n not in direct and any(isinstance(x, ast.Name) and x.id in direct for x in ast.walk(d)):
                    direct.add(n)
                    changed = True
        kernels = direct
        for node in tree.body:
            targets: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                targets = [node.name]
            elif isinstance(node, ast.ClassDef) and any(_base_name(b).endswith("Function") for b in node.bases):
                targets = [node.name]  # an autograd.Function wrapping a kernel; an nn.Module's callers don't change
            elif isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if not targets:
                continue
            inside = any(node.lineno <= ln <= cast(int, node.end_lineno) for ln in lines)
            launches = any(isinstance(n, ast.Name) and n.id in kernels for n in ast.walk(node))
            if inside or launches:
                for t in targets:
                    for m in names:
                        out[f"{m}.{t}"] = f"{path.name}:{node.lineno} {t} runs CUDA-only code ({', '.join(ids)})"
    return out


def _base_name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _module_names(path: Path, roots: list[Path]) -> set[str]:
    names = {path.stem} if path.stem != "__init__" else {path.parent.name}
    for root in roots:
        try:
            rel = path.resolve().relative_to(root.resolve()).with_suffix("")
        except ValueError:
            continue
        parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
        if parts:
            names.add(".".join(parts))
    return names


def diagnostic(ref: Ref, display: str, migrated: bool | None = None) -> Diagnostic:
    """The user-facing form of one reference; `migrated` overrides whether migrate rewrites it."""
    info = load_source_apis().diagnostics[ref.id]
    return Diagnostic(
        id=ref.id, level=info.level, message=f"{info.title}: {ref.detail}", file=display, line=ref.line,
        col=ref.col, npu_equivalent=info.npu, auto=info.auto if ref.auto is None else ref.auto, fix=info.fix,
        title=info.title, migrate=ref.migrated if migrated is None else migrated,
    )


def scan_text(text: str, tree: ast.Module, display: str) -> list[Diagnostic]:
    return [diagnostic(ref, display) for ref in Finder(text, tree, load_source_apis()).run()]


def scan(model_file: Path | str) -> ScanReport:
    """Diagnostics for `model_file` and the local modules it imports, transitively (parsed, never executed)."""
    model_file = Path(model_file).resolve()
    text, tree = parse_file(model_file)
    anchor = model_file.parent
    report = ScanReport(files=[])
    todo: list[tuple[Path, str, ast.Module]] = [(model_file, text, tree)]
    done: list[tuple[Path, str, ast.Module]] = []
    seen = {model_file}
    while todo:
        path, text, tree = todo.pop(0)
        done.append((path, text, tree))
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
    apis = load_source_apis()
    first = [(path, tree, Finder(text, tree, apis).run()) for path, text, tree in done]
    cuda = cuda_only_modules(first, _roots(model_file) + [anchor])
    for path, text, tree in done:
        own = {k: v for k, v in cuda.items() if not v.startswith((path.name + " ", path.name + ":"))}
        refs = Finder(text, tree, apis, own).run()
        report.files.append(_display(path, anchor))
        report.diagnostics.extend(diagnostic(r, _display(path, anchor)) for r in refs)
    return report
