"""The AST source scan on fixture files with known findings (tests/fixtures/source_scan/), never executing them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npuport.errors import NpuportError
from npuport.rules import fail_on, suppress
from npuport.scan.source_apis import load_source_apis
from npuport.scan.source_scan import scan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "source_scan"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "diagnostics"

# (file, line, col, id, auto): every reference the fixtures hold, pinned
EXPECTED = [
    ("model.py", 12, 12, "NPS080", False),
    ("model.py", 13, 1, "NPS020", False),
    ("model.py", 14, 1, "NPS021", False),
    ("model.py", 15, 10, "NPS004", False),
    ("model.py", 15, 20, "NPS001", True),
    ("model.py", 18, 36, "NPS004", False),
    ("model.py", 19, 29, "NPS010", True),
    ("model.py", 20, 30, "NPS011", False),
    ("model.py", 21, 9, "NPS001", True),
    ("model.py", 22, 16, "NPS050", False),
    ("model.py", 23, 14, "NPS041", True),
    ("model.py", 24, 26, "NPS002", False),
    ("model.py", 28, 13, "NPS003", True),
    ("model.py", 29, 14, "NPS004", True),
    ("model.py", 30, 31, "NPS004", True),
    ("model.py", 31, 8, "NPS006", True),
    ("model.py", 31, 39, "NPS005", False),
    ("model.py", 32, 14, "NPS030", True),
    ("model.py", 34, 9, "NPS040", True),
    ("model.py", 35, 12, "NPS005", False),
    ("helpers.py", 1, 1, "NPS070", False),
    ("helpers.py", 2, 1, "NPS062", False),
    ("helpers.py", 3, 1, "NPS062", False),
    ("helpers.py", 6, 2, "NPS061", False),
    ("pkg/layers.py", 5, 7, "NPS060", False),
    ("pkg/norms.py", 1, 1, "NPS072", False),
    ("pkg/norms.py", 4, 33, "NPS083", False),
]


def test_fixture_findings_are_exact() -> None:
    report = scan(FIXTURES / "model.py")
    got = [(d.file, d.line, d.col, d.id, d.auto) for d in report.diagnostics]
    assert got == EXPECTED
    assert report.files == ["model.py", "helpers.py", "pkg/__init__.py", "pkg/layers.py", "pkg/norms.py"]


def test_summary_counts_like_hipify() -> None:
    s = scan(FIXTURES / "model.py").summary
    assert (s["found"], s["handled_automatically"], s["manual"]) == (27, 10, 17)
    assert s["by_id"]["NPS004"] == 4


def test_strings_outside_device_positions_are_not_device_strings() -> None:
    report = scan(FIXTURES / "model.py")
    lines = {d.line for d in report.diagnostics}
    assert 36 not in lines  # "we love cuda"
    assert scan(FIXTURES / "clean.py").diagnostics == []


def test_imports_are_resolved_locally_and_never_executed(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("import sibling\nimport torch\nimport numpy\nx = 1\n")
    (tmp_path / "sibling.py").write_text("raise SystemExit('executed!')\nimport torch\ntorch.cuda.synchronize()\n")
    report = scan(tmp_path / "model.py")
    assert report.files == ["model.py", "sibling.py"]
    assert [(d.file, d.id) for d in report.diagnostics] == [("sibling.py", "NPS001")]


def test_broken_local_import_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("import broken\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    assert scan(tmp_path / "model.py").notes == ["skipped broken.py: " + "broken.py is not valid Python".replace("broken.py", str(tmp_path / "broken.py"), 1)]


@pytest.mark.parametrize("content, problem", [(None, "cannot read"), ("def (:\n", "not valid Python")])
def test_bad_model_file_is_a_user_error(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "model.py"
    if content is not None:
        path.write_text(content)
    with pytest.raises(NpuportError, match=problem):
        scan(path)


def test_aliases_resolve() -> None:
    import ast

    from npuport.scan.cuda_refs import Finder

    text = "import torch as th\nfrom torch import cuda\nfrom torch.backends import cudnn\nth.cuda.empty_cache()\ncuda.manual_seed(0)\ncudnn.deterministic = True\n"
    refs = Finder(text, ast.parse(text)).run()
    assert [(r.line, r.id) for r in refs] == [(4, "NPS001"), (5, "NPS001"), (6, "NPS020")]
    assert refs[0].edits and not refs[1].edits  # `th.cuda` is literal text; `cuda.` is an alias migrate leaves alone


def test_suppress_and_fail_on_apply_to_diagnostics() -> None:
    diags = scan(FIXTURES / "model.py").diagnostics
    assert fail_on(diags, "error")
    left = suppress(diags, ["NPS050", "NPS060-NPS075"])
    assert not fail_on(left, "error") and fail_on(left, "warning")


def test_json_round_trips() -> None:
    js = json.loads(json.dumps(scan(FIXTURES / "model.py").to_json()))
    assert js["schema"] == "npuport.source_scan/1" and js["summary"]["found"] == 27
    assert {"id", "level", "message", "file", "line", "col", "npu_equivalent", "auto", "fix"} <= set(js["diagnostics"][0])


def test_every_diagnostic_has_a_doc_page_and_back() -> None:
    ids = set(load_source_apis().diagnostics)
    pages = {p.stem for p in DOCS.glob("NPS*.md")}
    assert ids == pages
    for did in ids:
        text = (DOCS / f"{did}.md").read_text()
        assert text.startswith(f"# {did}") and "## Why" in text and "## How to fix" in text


def test_recall_references_from_real_repositories(tmp_path) -> None:
    """Patterns seen in public training code (TinyLlama's lit_gpt, llm.c, modded-nanogpt, flash-attn users): each
    gets its diagnostic."""
    src = tmp_path / "train.py"
    src.write_text(
        "import torch\n"
        "import rotary_emb\n"
        "import xentropy_cuda_lib\n"
        "from kernels import get_kernel\n"
        "import torch._inductor.config as config\n"
        "config.coordinate_descent_tuning = True\n"
        "if torch.version.cuda is not None:\n"
        "    y = torch._scaled_mm(a, b, out_dtype=torch.bfloat16)\n"
        "w = x.to(torch.float8_e4m3fn)\n"
        "k = get_kernel('kernels-community/activation')\n"
        "model = torch.compile(model)\n"
        "torch.distributed.init_process_group(backend='cuda:nccl,cpu:gloo')\n"
    )
    got = [(d.line, d.id) for d in scan(src).diagnostics]
    for want in [(2, "NPS076"), (3, "NPS076"), (6, "NPS085"), (7, "NPS090"), (8, "NPS091"), (9, "NPS091"),
                 (10, "NPS092"), (11, "NPS084"), (12, "NPS012")]:
        assert want in got, want


def test_nccl_environment_variables_name_their_hccl_equivalent(tmp_path: Path) -> None:
    """NCCL / TORCH_NCCL variables the program sets are read from mappings/hccl.yaml's env table (the audit's HCCL
    lookups use the same data); one with no HCCL counterpart is left alone."""
    f = tmp_path / "train.py"
    from npuport.scan.cuda_refs import _npu_backend

    f.write_text('import os\nos.environ["NCCL_ALGO"] = "Ring"\nos.environ["NCCL_NOT_A_THING"] = "1"\n')
    got = {(d.line, d.id): d.message for d in scan(f).diagnostics}
    assert "HCCL_ALGO" in got[(2, "NPS080")]
    assert not any(line == 3 for line, _ in got)
    assert _npu_backend("cuda:nccl,cpu:gloo") == "npu:hccl,cpu:gloo"
