"""`npuport migrate`: the mechanical part of a CUDA -> NPU port, as one unified diff over a whole program.

Only rewrites that cannot change what the program does are made, each located by the AST and applied to the
original text by position (comments and formatting stay): `.cuda()` -> `.npu()`, `.is_cuda` -> `.is_npu`,
`torch.cuda.X` -> `torch.npu.X` where torch.npu has X, `from torch.cuda.amp import ...`, and `import torch_npu`
after the torch import (it is what makes torch.npu exist).

Device and backend strings change together or not at all. "cuda" in a device position, every test of a device
string against "cuda" (`'cuda' in device`, `device_type == 'cuda'`, `.startswith('cuda')`, keys of a dict indexed
by a device type) and every f-string that builds one (`f'cuda:{rank}'`) are rewritten as a group across all the
files migrated together, so the program takes the same branches on the NPU as it took on CUDA. When one "cuda"
string is used in a way the AST does not show (a message, a value stored for later), none of the group is
rewritten and a note names the strings that held it back. "nccl" strings follow the same rule. The edits whose
effect depends on the device that is there (`.cuda()`, `torch.cuda.is_available()`, `is_bf16_supported()`, amp,
`synchronize()`: npuport.scan.migrate_coupling) are held back with them, and a local module npuport cannot parse
holds back both groups: the strings may reach a test there.

Everything else stays a diagnostic of the source scan for a person to decide, and is counted per file.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from npuport.errors import NpuportError
from npuport.scan.cuda_refs import Edit, Ref
from npuport.scan.migrate_coupling import ProgramFinder, coupled_import_edits, coupled_reason, cuda_name, holds_strings
from npuport.scan.source_scan import MAX_FILES, Diagnostic, cuda_only_modules, diagnostic, local_imports, parse_file

IMPORT_LINE = "import torch_npu  # added by npuport migrate: registers the NPU backend and torch.npu\n"
GROUP_NAMES = {"device": '"cuda" device strings', "backend": '"nccl" backend strings'}


@dataclass
class Migration:
    path: Path
    original: str
    migrated: str
    edits: list[Edit]
    added_import: bool
    remaining: list[Diagnostic] = field(default_factory=list)  # references a person still has to change
    display: str = ""  # the path shown in the diff and messages, relative to the root
    refs: list[Ref] = field(default_factory=list)  # every CUDA-specific reference found, rewritten or not

    @property
    def changed(self) -> bool:
        return self.migrated != self.original

    @property
    def diff(self) -> str:
        name = self.display or self.path.name
        return "".join(difflib.unified_diff(
            self.original.splitlines(keepends=True), self.migrated.splitlines(keepends=True),
            fromfile=f"a/{name}", tofile=f"b/{name}",
        ))

    def summary_line(self) -> str:
        manual = sum(1 for d in self.remaining if d.level != "info")
        check = len(self.remaining) - manual
        head = f"{len(self.edits)} mechanical change(s)" + (" + import torch_npu" if self.added_import else "")
        tail = f"; {check} to check (info)" if check else ""
        return f"{head}; {manual} reference(s) still need a hand change{tail}" + (" (see below)" if self.remaining else "")


@dataclass
class Program:
    """Every file migrated together: the entry file and the local modules it imports."""

    files: list[Migration]
    notes: list[str] = field(default_factory=list)
    # group -> what held it back: "file:line" of a string (or a device check) npuport cannot follow, or a file it
    # could not read
    held: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # local modules npuport could not read -> why: not ported

    @property
    def diff(self) -> str:
        return "".join(m.diff for m in self.files if m.changed)

    @property
    def remaining(self) -> list[Diagnostic]:
        return [d for m in self.files for d in m.remaining]

    def summary_lines(self) -> list[str]:
        lines = [f"{m.display}: {m.summary_line()}" for m in self.files]
        # an unreadable module is a file of the program like the others: its CUDA code, if any, is not ported
        lines += [f"{name}: not read, not ported (change it by hand): {why}" for name, why in self.skipped.items()]
        total_edits = sum(len(m.edits) for m in self.files)
        total_left = sum(1 for d in self.remaining if d.level != "info")
        check = len(self.remaining) - total_left
        unread = f"; {len(self.skipped)} file(s) not read, not ported" if self.skipped else ""
        done = " (none: the CUDA-specific code found is all ported)" if not self.remaining and not self.skipped else ""
        lines.append(f"{len(self.files) + len(self.skipped)} file(s): {total_edits} mechanical change(s); {total_left} "
                     f"reference(s) still need a hand change" + (f", {check} to check (info)" if check else "") + unread + done)
        return lines


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
    after: int | None = 0  # end_lineno is typed Optional; parsed nodes always have one
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


@dataclass
class _Parsed:
    path: Path
    display: str
    text: str
    tree: ast.Module
    refs: list[Ref]
    import_edits: list[Edit]


def _display(path: Path, root: Path) -> str:
    try:
        return Path(os.path.relpath(path, root)).as_posix()
    except ValueError:  # another drive (Windows)
        return path.as_posix()


def program_files(entry: Path, follow: bool = True, roots: list[Path] | None = None) -> tuple[list[Path], list[str]]:
    """The entry file and, with `follow`, the local modules it imports transitively (sibling files, its package,
    folders it appends to sys.path, and `roots`: the repository root a `pip install -e .` would put on the path).
    A file that does not parse is listed, its imports not followed; migrate_program reports it when it reads it."""
    entry = entry.resolve()
    files, notes, todo, seen = [entry], [], [entry], {entry}
    while follow and todo:
        path = todo.pop(0)
        try:
            _, tree = parse_file(path)
        except NpuportError:
            continue
        for dep in local_imports(path, tree, roots):
            if dep not in seen:
                if len(seen) >= MAX_FILES:
                    notes.append(f"stopped following imports after {MAX_FILES} files")
                    return files, notes
                seen.add(dep)
                files.append(dep)
                todo.append(dep)
    return files, notes


def migrate_program(entry: Path | str, root: Path | str | None = None, follow: bool = True) -> Program:
    """The migrated text of the entry file and its local imports (nothing written), with one diff whose paths are
    relative to `root` (default: the current folder) so `git apply` / `patch -p1` work from there."""
    entry = Path(entry)
    if not entry.is_file():
        raise NpuportError(f"cannot read {entry}", "an existing Python file", str(entry))
    if entry.suffix != ".py":  # a config or notebook would be parsed as Python, or "migrated" to nothing
        raise NpuportError(f"cannot migrate {entry}: not a Python script", "a Python source file ending in .py",
                           f"a {entry.suffix or 'suffix-less'} file")
    base = Path(root).resolve() if root else Path.cwd().resolve()
    paths, notes = program_files(entry, follow, [base] if root else None)
    parsed: list[_Parsed] = []
    skipped: dict[str, str] = {}
    for path in paths:
        try:
            text, tree = parse_file(path)
        except NpuportError as exc:
            if path == paths[0]:
                raise
            skipped[_display(path, base)] = exc.render().replace(str(path), _display(path, base))
            continue
        finder = ProgramFinder(text, tree)
        refs = finder.run()
        parsed.append(_Parsed(path, _display(path, base), text, tree, refs, finder.import_edits()))
    # second pass: calls into the program's own CUDA-only modules (Triton kernels, extension wrappers) are references
    cuda = cuda_only_modules([(p.path, p.tree, p.refs) for p in parsed], [base, paths[0].parent])
    if cuda:
        for p in parsed:
            own = {k: v for k, v in cuda.items() if not v.startswith((p.path.name + " ", p.path.name + ":"))}
            if own:
                finder = ProgramFinder(p.text, p.tree, cuda_modules=own)
                p.refs = finder.run()
                p.import_edits = finder.import_edits()
    holds = _holds(parsed, list(skipped))
    notes += [_hold_note(group, where) for group, where in holds.items()]
    if "device" in holds:
        coupled = [f"{p.display}:{r.line}" for p in parsed for r in p.refs if (r.edits or r.via_import) and coupled_reason(r)]
        if coupled:
            notes.append(f"{len(coupled)} edit(s) that move to, check or use the device held back with the \"cuda\" device "
                         f"strings, since alone they would change what the program does: {_first(coupled)} (listed below)")
    files = [_migrate(p, set(holds)) for p in parsed]
    return Program(files=files, notes=notes, held={g: [w for w, _ in where] for g, where in holds.items()}, skipped=skipped)


# why a group of strings is held back: a string npuport cannot follow, a device check or move it cannot rewrite
# (strings rewritten beside it would take another branch), a module of the program it could not read
_STRING, _CHECK, _UNREAD = "string", "check", "unread"


def _holds(parsed: list[_Parsed], skipped: list[str]) -> dict[str, list[tuple[str, str]]]:
    """group -> (where, why) of everything that keeps the group's strings unchanged in every file."""
    out: dict[str, list[tuple[str, str]]] = {}
    for p in parsed:
        for r in p.refs:
            if r.group and r.blocker:
                out.setdefault(r.group, []).append((f"{p.display}:{r.line}", _STRING))
            elif not r.edits and not r.via_import and holds_strings(r):
                out.setdefault("device", []).append((f"{p.display}:{r.line}", _CHECK))
    if skipped:  # its tests are invisible: strings passed to it may be compared with "cuda" there
        groups = {r.group for p in parsed for r in p.refs if r.group}
        groups |= {"device"} if any(coupled_reason(r) for p in parsed for r in p.refs) else set()
        for group in sorted(groups):
            out.setdefault(group, []).extend((name, _UNREAD) for name in skipped)
    return out


def _first(where: list[str]) -> str:
    return ", ".join(where[:5]) + (f" (+{len(where) - 5} more)" if len(where) > 5 else "")


def _hold_note(group: str, where: list[tuple[str, str]]) -> str:
    clauses = []
    for kind, text in ((_STRING, "use(s) the string in a way npuport cannot follow"),
                       (_CHECK, "check(s), select(s) or ask(s) about the device in a way npuport cannot rewrite"),
                       (_UNREAD, "could not be read (the strings may reach a test there)")):
        places = [w for w, k in where if k == kind]
        if places:
            clauses.append(f"{_first(places)} {text}")
    return (f"{GROUP_NAMES[group]} left unchanged in every file: {'; '.join(clauses)}, and rewriting the others "
            "alone would change which branches the program takes; change them together by hand")


def _migrate(p: _Parsed, held: set[str]) -> Migration:
    # while the device strings are held back, so are the edits that only keep behaviour together with them
    coupled = {id(r): why for r in p.refs if (why := coupled_reason(r))} if "device" in held else {}
    held_imports, held_names = coupled_import_edits(p.text, p.tree, p.import_edits) if "device" in held else (set(), set())
    kept = [r for r in p.refs if r.edits and r.group not in held and id(r) not in coupled]
    imports = [e for e in p.import_edits if e not in held_imports]
    edits = sorted(set([e for r in kept for e in r.edits] + imports), key=lambda e: e.start)
    added = bool(edits) and not _imports_torch_npu(p.tree)
    applied = list(edits)
    if added:
        at = _import_offset(p.text, p.tree)
        prefix = "" if at == 0 or p.text[at - 1] == "\n" else "\n"
        applied.append(Edit(at, at, prefix + IMPORT_LINE))
    migrated = _apply(p.text, applied)
    try:
        ast.parse(migrated)
    except SyntaxError as exc:  # a bug in an edit, never the user's fault
        raise AssertionError(f"migration of {p.path} produced invalid Python at line {exc.lineno}: {exc.msg}") from exc
    remaining = []
    for r in p.refs:
        why = _held_why(r, held, coupled.get(id(r)), held_names)
        if why:
            remaining.append(_held_diagnostic(r, p.display, why))
        elif not (r.edits or r.via_import):
            remaining.append(diagnostic(r, p.display, migrated=False))
    return Migration(path=p.path, original=p.text, migrated=migrated, edits=edits, added_import=added,
                     remaining=remaining, display=p.display, refs=list(p.refs))


def _held_why(r: Ref, held: set[str], coupled: str | None, held_names: set[str]) -> str | None:
    """Why a reference migrate could rewrite is left (None: rewritten, or nothing to rewrite)."""
    if r.edits and r.group in held:
        return f"the {GROUP_NAMES[r.group]} are held back, see the note"
    if (r.edits or r.via_import) and coupled:
        return f"{coupled}; the \"cuda\" device strings are held back, see the note"
    if coupled and holds_strings(r):  # through an alias (`import torch.cuda as tc`): it holds the strings back
        return f"{coupled}; npuport cannot rewrite it here, so the \"cuda\" device strings are held back with it"
    if r.via_import and not r.edits and cuda_name(r) in held_names:
        return "imported in one statement with a torch.cuda call that is held back, see the note"
    return None


def _held_diagnostic(r: Ref, display: str, why: str) -> Diagnostic:
    """A rewrite held back is a hand change, whatever the level of the diagnostic it would have cleared."""
    d = diagnostic(dataclasses.replace(r, detail=f"{r.detail} (not ported: {why})"), display, migrated=False)
    return dataclasses.replace(d, level="warning" if d.level == "info" else d.level)


def migrate_file(path: Path | str) -> Migration:
    """One file alone (its imports are not followed): the migrated text, its diff, what a person still has to do."""
    path = Path(path)
    return migrate_program(path, root=path.resolve().parent, follow=False).files[0]


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
