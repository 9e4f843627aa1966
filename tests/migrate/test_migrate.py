"""`npuport migrate`: the diff applies with patch(1), the result parses, only device tokens change, and the CPU
path of a tiny model computes the same values before and after.

What the behaviour test proves: with no accelerator, the migrated file runs the same CPU code path as the
original (torch.cuda.is_available() and the stand-in torch.npu.is_available() are both False), so the rewrite
broke nothing around the device code. It cannot prove the NPU branch works; that needs a machine with CANN.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from npuport.errors import NpuportError
from npuport.scan.migrate import IMPORT_LINE, migrate_file, write_migration

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "source_scan"
_DEVICE_TOKENS = re.compile(r"cuda|nccl")


def _changed_pairs(m) -> list[tuple[str, str]]:  # noqa: ANN001
    old = m.original.splitlines()
    new = [line for line in m.migrated.splitlines() if line + "\n" != IMPORT_LINE]
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new) if a != b]


@pytest.mark.parametrize("name", ["model.py", "tiny_model.py"])
def test_only_device_tokens_change_and_result_parses(name: str) -> None:
    m = migrate_file(FIXTURES / name)
    ast.parse(m.migrated)
    assert m.added_import and m.migrated.count(IMPORT_LINE) == 1
    for old, new in _changed_pairs(m):
        # undoing the token renames gives back the original line: nothing else moved
        back = new.replace("torch.npu.NPUGraph", "torch.cuda.CUDAGraph").replace("is_npu", "is_cuda")
        back = back.replace("hccl", "nccl").replace("npu", "cuda")
        assert back == old, (old, new)
        assert _DEVICE_TOKENS.search(old)
    assert "# the \"cuda\" in this comment must survive" in migrate_file(FIXTURES / "tiny_model.py").migrated


def test_what_migrate_leaves_alone() -> None:
    text = migrate_file(FIXTURES / "model.py").migrated
    for kept in ('"we love cuda"', "torch.cuda.get_device_capability()", "torch.cuda.memory_usage()",
                 'os.environ["CUDA_VISIBLE_DEVICES"]', "torch.backends.cudnn.benchmark"):
        assert kept in text, kept
    # device and backend strings change together with the tests that read them
    for changed in ('dist.get_backend() == "hccl"', 'x.device.type == "npu"', 'f"npu:{x.get_device()}"',
                    'dist.init_process_group("hccl"', 'x.to("npu"'):
        assert changed in text, changed


def test_diff_applies_with_patch(tmp_path: Path) -> None:
    if shutil.which("patch") is None:
        pytest.skip("patch(1) not installed")
    m = migrate_file(FIXTURES / "model.py")
    work = tmp_path / "model.py"
    shutil.copy(FIXTURES / "model.py", work)
    subprocess.run(["patch", "-p1", "-s", "-d", str(tmp_path)], input=m.diff, text=True, check=True)
    assert work.read_text() == m.migrated


def _run(source: str, path: Path) -> torch.Tensor:
    namespace: dict = {"__name__": "migrated_fixture", "__file__": str(path)}
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - our own fixture, on CPU
    return namespace["run"](seed=0)


def test_migrated_model_behaves_the_same_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    path = FIXTURES / "tiny_model.py"
    before = _run(path.read_text(), path)
    stub = types.ModuleType("torch_npu")  # a stand-in: no NPU here, so torch.npu reports none available
    monkeypatch.setitem(sys.modules, "torch_npu", stub)
    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(is_available=lambda: False, synchronize=lambda: None), raising=False)
    monkeypatch.setattr(torch.Tensor, "is_npu", property(lambda self: False), raising=False)  # torch_npu adds it
    after = _run(migrate_file(path).migrated, path)
    assert torch.equal(before, after)


def test_clean_file_is_unchanged() -> None:
    m = migrate_file(FIXTURES / "clean.py")
    assert not m.changed and m.diff == "" and not m.added_import


def test_existing_torch_npu_import_is_not_duplicated(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch_npu\nx = torch.ones(1).cuda()\n")
    m = migrate_file(p)
    assert m.migrated == "import torch\nimport torch_npu\nx = torch.ones(1).npu()\n"


def test_import_goes_after_docstring_when_torch_is_not_imported(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text('"""doc"""\nfrom __future__ import annotations\n\ndef f(m):\n    return m.cuda()\n')
    m = migrate_file(p)
    assert m.migrated.splitlines()[2] == IMPORT_LINE.rstrip("\n")
    ast.parse(m.migrated)


def test_non_ascii_columns(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text('import torch\nnom = "é"; x = torch.zeros(1, device="cuda")  # ü\n')
    assert 'nom = "é"; x = torch.zeros(1, device="npu")  # ü' in migrate_file(p).migrated


def test_write_makes_a_backup_and_refuses_to_overwrite_it(tmp_path: Path) -> None:
    p = tmp_path / "model.py"
    shutil.copy(FIXTURES / "tiny_model.py", p)
    original = p.read_text()
    m = migrate_file(p)
    backup = write_migration(m)
    assert backup == tmp_path / "model.py.bak" and backup.read_text() == original and p.read_text() == m.migrated
    with pytest.raises(NpuportError, match="already exists"):
        write_migration(m)
    assert write_migration(m, force=True) == backup
