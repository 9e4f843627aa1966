"""What `npuport migrate` holds back with the "cuda" device strings (npuport.scan.migrate_coupling,
mappings/migrate.yaml): the moves to the device and device checks whose edit alone changes the branches, a local
module it cannot read, and the device argument of torch.set_default_device."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from npuport.scan.migrate import _apply, migrate_program
from npuport.scan.migrate_coupling import ProgramFinder, load_coupling
from tests.migrate.device_world import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "migrate"


def _program(tmp_path: Path, **files: str):  # noqa: ANN202 - a Program
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    return migrate_program(tmp_path / f"{next(iter(files))}.py", root=tmp_path)


def test_set_default_device_is_a_device_argument(tmp_path: Path) -> None:
    """The reviewer's case: set_default_device("cuda") held every string back, and .cuda() alone was rewritten."""
    program = _program(tmp_path, t='import torch\nx = torch.zeros(2).cuda()\nif x.device.type == "cuda":\n'
                                   '    print("fast path")\ntorch.set_default_device("cuda")\n')
    m = program.files[0]
    assert program.held == {} and m.remaining == []
    for moved in ("x = torch.zeros(2).npu()", 'if x.device.type == "npu":', 'torch.set_default_device("npu")'):
        assert moved in m.migrated, moved


def test_held_strings_hold_the_moves_and_checks_that_read_them(tmp_path: Path) -> None:
    program = _program(tmp_path, t='import torch\nx = torch.zeros(2).cuda()\nif x.device.type == "cuda":\n'
                                   '    print("fast path")\nprint(x.is_cuda, "cuda")\ntorch.cuda.synchronize()\n')
    m = program.files[0]
    assert program.held == {"device": ["t.py:5"]}
    assert ".cuda()" in m.migrated and "x.is_cuda" in m.migrated and '== "cuda"' in m.migrated
    assert "torch.npu.synchronize()" in m.migrated  # no device decision in it: still ported
    held = {(d.line, d.id): d for d in m.remaining}
    for key in ((2, "NPS003"), (5, "NPS006")):
        assert held[key].level == "warning" and "not ported: " in held[key].message, key  # a hand change, with why
    assert any("move(s) to the device or device check(s) held back" in n and "t.py:2, t.py:5" in n for n in program.notes)


def test_an_availability_check_that_picks_a_held_string_stays(tmp_path: Path) -> None:
    """`"cuda" if torch.npu.is_available() else "cpu"` would pick CUDA exactly when an NPU is present."""
    text = 'import torch\n\ndef pick():\n    return "cuda" if torch.cuda.is_available() else "cpu"\n'
    m = _program(tmp_path, u=text).files[0]
    assert m.migrated == text and not m.added_import
    (d,) = [d for d in m.remaining if d.id == "NPS001"]
    assert d.level == "warning" and "torch.cuda.is_available" in d.message and "device strings are held back" in d.message


def test_a_check_npuport_cannot_rewrite_holds_the_strings(tmp_path: Path) -> None:
    """Through an alias the check stays torch.cuda: rewriting the strings beside it would run on the CPU on an NPU."""
    program = _program(tmp_path, a='import torch\nimport torch.cuda as tc\n'
                                   'device = "cuda" if tc.is_available() else "cpu"\nx = torch.zeros(2).to(device)\n')
    assert program.held == {"device": ["a.py:3"]} and '"cuda" if tc.is_available()' in program.files[0].migrated
    assert any("a.py:3 check(s) or select(s) the device in a way npuport cannot rewrite" in n for n in program.notes)


def test_an_import_of_a_held_check_stays_with_its_names(tmp_path: Path) -> None:
    text = ('import torch\nfrom torch.cuda import is_available, synchronize\nLABELS = {"gpu": "cuda"}\n'
            "if is_available():\n    synchronize()\n")
    m = _program(tmp_path, b=text).files[0]
    assert m.migrated == text
    assert {(d.line, d.id) for d in m.remaining} >= {(4, "NPS001"), (5, "NPS001")}  # both names counted as not ported


def test_held_program_takes_the_branches_it_took_before_on_an_npu() -> None:
    """Run against a stand-in torch on an Ascend machine: the migrated program decides as the unported one did (the
    CPU, no fast path). Rewriting the checks alone (the earlier rule) picks "cuda" there and moves the tensor."""
    folder = FIXTURES / "held_checks"
    original = {"train": (folder / "train.py").read_text()}
    program = migrate_program(folder / "train.py", root=folder)
    migrated = {"train": program.files[0].migrated}
    before, calls_before = run(original, "train", "npu")
    after, calls_after = run(migrated, "train", "npu")
    assert after == before and after["device"] == "cpu" and after["fast_path"] is False
    assert "npu.synchronize" in [c[0] for c in calls_after]  # the edit that decides nothing is still made
    text = original["train"]
    edits = [e for r in ProgramFinder(text, ast.parse(text)).run() if not r.group for e in r.edits]
    earlier, calls_earlier = run({"train": "import torch_npu\n" + _apply(text, edits)}, "train", "npu")
    assert earlier["device"] == "cuda" and ("Tensor.npu", (), ()) in calls_earlier  # the silent change, caught


def test_an_unreadable_local_module_holds_every_string(tmp_path: Path) -> None:
    """helper.py tests the device string it is given; npuport cannot read it, so nothing may be rewritten."""
    train = ('import torch, helper\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n'
             'helper.setup(device)\ntorch.cuda.synchronize()\n')
    program = _program(tmp_path, train=train, helper='def setup(device):\n    if device == "cuda" print("fast")\n')
    assert [m.display for m in program.files] == ["train.py"] and list(program.skipped) == ["helper.py"]
    assert "not valid Python" in program.skipped["helper.py"] and str(tmp_path) not in program.skipped["helper.py"]
    assert program.held == {"device": ["helper.py"]}
    assert '"cuda" if torch.cuda.is_available()' in program.files[0].migrated
    assert "torch.npu.synchronize()" in program.files[0].migrated
    summary = program.summary_lines()
    assert summary[1].startswith("helper.py: not read, not ported")
    assert summary[-1] == "2 file(s): 1 mechanical change(s); 2 reference(s) still need a hand change; 1 file(s) not read, not ported"
    assert sum("helper.py" in n for n in program.notes) == 1 and "could not be read" in program.notes[0]


def test_an_unreadable_module_without_device_code_is_still_not_ported(tmp_path: Path) -> None:
    program = _program(tmp_path, train="import helper\nhelper.run()\n", helper="def run(:\n")
    assert program.held == {} and program.diff == ""
    assert "all ported" not in program.summary_lines()[-1] and "1 file(s) not read" in program.summary_lines()[-1]


def test_a_coupled_id_must_be_a_diagnostic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import yaml

    from npuport import mappings
    from npuport.errors import MappingError

    root = tmp_path / "mappings"
    shutil.copytree(Path(mappings.__file__).parent, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    doc = yaml.safe_load((root / "migrate.yaml").read_text())
    doc["coupled"]["ids"]["NPS999"] = {"why": "a typo of NPS003", "source": "this test"}
    (root / "migrate.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    load_coupling.cache_clear()
    try:
        with pytest.raises(MappingError, match="NPS999.*not a diagnostic"):
            load_coupling()
    finally:
        load_coupling.cache_clear()
