"""Migrated programs take the branches the originals took: each fixture's device logic runs on the CPU against a
stand-in torch, the original as on a CUDA machine, the migrated program as on an Ascend machine (torch_npu, no
CUDA), with and without torchrun's DDP environment. Their decisions and torch calls must match once device names
are mapped back (npu -> cuda, hccl -> nccl).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npuport.scan.migrate import migrate_program
from tests.migrate.device_world import as_cuda, run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "migrate"
PROGRAMS = {"nanogpt_like": "train", "llmc_like": "train_gpt2", "held": "train"}
ENVS = {"single": {}, "ddp": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}}


def _sources(folder: Path) -> dict[str, str]:
    return {p.stem: p.read_text() for p in folder.glob("*.py")}


def _migrated(folder: Path, entry: str) -> tuple[dict[str, str], object]:
    program = migrate_program(folder / f"{entry}.py", root=folder)
    return {m.path.stem: m.migrated for m in program.files}, program


def _normalized(calls: list) -> list:
    return [(as_cuda(name), as_cuda(args), as_cuda(kwargs)) for name, args, kwargs in calls]


@pytest.mark.parametrize("env", list(ENVS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_same_branches_on_npu_as_on_cuda(name: str, env: str) -> None:
    folder, entry = FIXTURES / name, PROGRAMS[name]
    values_cuda, calls_cuda = run(_sources(folder), entry, "cuda", ENVS[env])
    sources_npu, program = _migrated(folder, entry)
    values_npu, calls_npu = run(sources_npu, entry, "npu", ENVS[env])
    assert {k: as_cuda(v) for k, v in values_npu.items()} == values_cuda
    assert _normalized(calls_npu) == _normalized(calls_cuda)
    if name != "held":  # a held program keeps its torch.cuda calls with the "cuda" strings they depend on
        assert not any(c[0].startswith("cuda.") for c in calls_npu), "the NPU run must not call torch.cuda"


def test_nanogpt_like_keeps_fused_adamw_and_pinned_batches() -> None:
    sources, program = _migrated(FIXTURES / "nanogpt_like", "train")
    values, calls = run(sources, "train", "npu", ENVS["ddp"])
    assert values["device"] == "npu:1" and values["device_type"] == "npu"
    assert ("npu.set_device", ("npu:1",), ()) in calls  # not fed "cuda:1"
    assert ("Tensor.pin_memory", (), ()) in calls and ("optim.AdamW", (), (("fused", True),)) in calls
    assert ("distributed.init_process_group", (), (("backend", "hccl"),)) in calls
    assert "model.py" in [m.display for m in program.files]  # the imported module migrated in the same diff


def test_rewriting_device_positions_alone_would_change_branches() -> None:
    """The check has teeth: the old substitution (device strings in device positions only) diverges."""
    import ast

    from npuport.scan.cuda_refs import Finder
    from npuport.scan.migrate import _apply

    folder = FIXTURES / "nanogpt_like"
    sources = _sources(folder)
    old = {}
    for stem, text in sources.items():
        edits = [e for r in Finder(text, ast.parse(text)).run() if r.id != "NPS005" and r.id != "NPS011" for e in r.edits]
        old[stem] = ("import torch_npu\n" if edits else "") + _apply(text, edits)
    values_cuda, _ = run(sources, "train", "cuda", ENVS["single"])
    values_old, calls_old = run(old, "train", "npu", ENVS["single"])
    assert values_cuda["device_type"] == "cuda" and values_old["device_type"] == "cpu"  # the silent change
    assert ("optim.AdamW", (), (("fused", None),)) in calls_old


def test_held_program_names_what_held_it() -> None:
    program = migrate_program(FIXTURES / "held" / "train.py", root=FIXTURES / "held")
    m = program.files[0]
    assert 'device = "cuda"' in m.migrated and 'if device == "cuda":' in m.migrated
    assert "torch.cuda.synchronize()" in m.migrated  # raises without CUDA, torch.npu's does not: held with the strings
    assert program.held == {"device": ["train.py:5"]}
    assert any('"cuda" device strings left unchanged in every file: train.py:5' in n for n in program.notes)
    held_ids = [(d.line, d.id) for d in m.remaining]
    assert (6, "NPS004") in held_ids and (7, "NPS005") in held_ids  # counted as hand changes


def test_capability_reads_stay_and_are_counted(tmp_path: Path) -> None:
    src = tmp_path / "caps.py"
    src.write_text("import torch\n"
                   "sm = torch.cuda.get_device_properties(0).multi_processor_count\n"
                   "mem = torch.cuda.get_device_properties(0).total_memory\n")
    m = migrate_program(src, root=tmp_path).files[0]
    assert "torch.cuda.get_device_properties(0).multi_processor_count" in m.migrated
    assert "torch.npu.get_device_properties(0).total_memory" in m.migrated
    assert [(d.line, d.id) for d in m.remaining] == [(2, "NPS051")]


def test_prefixed_backend_and_sys_path_modules(tmp_path: Path) -> None:
    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "lib" / "pkg" / "ops.py").write_text("import torch\n\ndef sync():\n    torch.cuda.synchronize()\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(
        "import sys\nfrom pathlib import Path\n\nwd = Path(__file__).parent.parent.resolve()\n"
        "sys.path.append(str(wd / 'lib'))\n\nimport torch.distributed as dist\nfrom pkg.ops import sync\n\n"
        "dist.init_process_group(backend='cuda:nccl,cpu:gloo')\n")
    program = migrate_program(tmp_path / "scripts" / "train.py", root=tmp_path)
    assert [m.display for m in program.files] == ["scripts/train.py", "lib/pkg/ops.py"]
    assert "backend='npu:hccl,cpu:gloo'" in program.files[0].migrated
    assert "torch.npu.synchronize()" in program.files[1].migrated
    assert "--- a/lib/pkg/ops.py" in program.diff and "+++ b/scripts/train.py" in program.diff


def test_program_diff_applies_with_git_from_the_root(tmp_path: Path) -> None:
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "nanogpt_like", repo / "nanogpt_like")
    program = migrate_program(repo / "nanogpt_like" / "train.py", root=repo)
    patch = tmp_path / "npu.patch"
    patch.write_text(program.diff)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)
    for m in program.files:
        assert m.path.read_text() == m.migrated


def test_calls_into_the_programs_own_cuda_code_are_counted() -> None:
    """modded-nanogpt's patterns: a local Triton module, an autograd.Function alias, a Hub kernel's attribute,
    @torch.compile, nvidia-smi. An nn.Module that uses the kernel inside and a plain function are not flagged."""
    folder = FIXTURES / "kernels_program"
    program = migrate_program(folder / "train.py", root=folder)
    train = next(m for m in program.files if m.display == "train.py")
    got = {(d.line, d.id) for d in train.remaining}
    for want in [(6, "NPS092"), (8, "NPS077"), (10, "NPS080"), (11, "NPS092"), (12, "NPS077"), (15, "NPS084"),
                 (17, "NPS092"), (18, "NPS077"), (23, "NPS094")]:
        assert want in got, want
    assert sum(1 for d in train.remaining if (d.line, d.id) == (18, "NPS077")) == 2  # SquareOp and square_twice
    assert not any(d.line in (20, 21) for d in train.remaining)  # Block() and its call: ported inside fused_ops.py
    assert "plain" not in next(d.message for d in train.remaining if d.line == 8)
    assert ").npu()" in train.migrated  # the multi-line `.cuda()` call is still rewritten at its token
    fused = next(m for m in program.files if m.display == "fused_ops.py")
    assert {d.id for d in fused.remaining} >= {"NPS061", "NPS062"}
