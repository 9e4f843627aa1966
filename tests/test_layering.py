"""The layer order of docs/architecture.md, enforced: no npuport module imports from a higher layer, none imports
npuport inside a function, and none imports relatively."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "npuport"
# bottom to top, as in docs/architecture.md's layer table
LAYERS = ("errors cachedir mappings trace devices render cost coverage scan model rules ascendc_kernels fusion parity profile audit "
          "bench api cli __main__").split()  # __main__: `python -m npuport`, the console script's entry
RANK = {name: i for i, name in enumerate(LAYERS)}


def _problems(pkg: Path = PKG) -> list[str]:
    out = []
    for f in sorted(pkg.rglob("*.py")):
        me = f.relative_to(pkg).with_suffix("").parts[0]
        tree = ast.parse(f.read_text(encoding="utf-8"))
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    out.append(f"{f.relative_to(pkg)}:{node.lineno}: relative import")
                    continue
                names = {f"{node.module}.{a.name}" if node.module == "npuport" else str(node.module) for a in node.names}
            elif isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            else:
                continue
            for name in sorted(n for n in names if n.split(".")[0] == "npuport"):
                dst = name.split(".")[1] if "." in name else None
                if id(node) not in top:
                    out.append(f"{f.relative_to(pkg)}:{node.lineno}: {name} imported inside a function or block")
                if me in RANK and dst in RANK and RANK[dst] > RANK[me]:
                    out.append(f"{f.relative_to(pkg)}:{node.lineno}: {me} imports {name} from a higher layer")
    return out


def test_every_package_is_a_layer() -> None:
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()} | {p.stem for p in PKG.glob("*.py")}
    assert packages - {"__init__"} <= set(LAYERS), sorted(packages - set(LAYERS) - {"__init__"})


def test_no_import_runs_up_a_layer_or_hides_in_a_function() -> None:
    assert _problems() == []


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    shutil.copytree(PKG, tmp_path / "npuport")
    bad = tmp_path / "npuport" / "cost" / "roofline.py"
    bad.write_text(bad.read_text() + "\n\ndef _f() -> None:\n    from npuport.audit import pipeline  # noqa\n")
    got = _problems(tmp_path / "npuport")
    assert any("inside a function" in p for p in got) and any("higher layer" in p for p in got), got
