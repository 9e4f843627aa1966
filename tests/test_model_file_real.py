"""A model file as users write them: prints while it runs, casts itself to bfloat16 with tied weights, keeps no
KV cache. The JSON on stdout stays valid, the decode is labelled for what it is, the backward seed is the loss line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from npuport.cli.main import cli

MODEL = Path(__file__).resolve().parent / "fixtures" / "models" / "nocache_gpt.py"
# a model whose decode inputs do not fit it: prefill traces, decode fails
HALF_MODEL = (
    "import torch\n"
    "def build_model():\n    return torch.nn.Linear(8, 8)\n"
    "def example_inputs(sc):\n"
    "    return {'input': torch.randn(sc.batch, sc.seq, 8 if sc.kind != 'decode' else 5)}\n"
    "def loss_fn(out, inputs):\n    return out.sum()\n"
)


def test_model_file_without_cache_prints_and_ties():
    runner = CliRunner()
    res = runner.invoke(cli, ["audit", str(MODEL), "--format", "json", "--scenario", "train:batch=2,seq=64",
                              "--scenario", "decode:past=127", "--quiet"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)  # the model's own print() went to stderr
    assert "forward (2, 64)" in res.stderr
    assert data["model"]["dtype"] == "bfloat16"
    assert data["model"]["parameters"] == 512 * 64 + 2 * (2 * 64 + 64 * 192 + 192 + 64 * 64 + 64)  # tied head once
    dec = next(s for s in data["scenarios"] if s["name"] == "decode")
    assert dec["recompute"] is True and dec["past"] == 127
    assert any("re-runs the whole 128-token context" in n for n in data["notes"])
    sdpa = next(o for o in data["ops"] if o["op"] == "aten::scaled_dot_product_attention")
    assert sdpa["scenarios"]["decode"]["shapes"][0]["inputs"].startswith("1x4x128x16")
    rec = [f for f in data["findings"] if f["id"] == "NPD001"]
    assert rec and rec[0]["level"] == "warning"
    seed = next(o for o in data["ops"] if o["op"] == "aten::ones_like")
    assert seed["sources"][0].endswith("nocache_gpt.py:42")  # the cross-entropy line, not the CLI's frames


def test_dtype_option_applies_to_model_files():
    runner = CliRunner()
    res = runner.invoke(cli, ["audit", str(MODEL), "--format", "json", "--scenario", "prefill:seq=32", "--dtype", "float16", "--quiet"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["model"]["dtype_source"] == "--dtype"


def test_partial_results_exit_1(tmp_path):
    """One scenario fails: the others are reported, the failed one is named in the JSON, exit 1."""
    model = tmp_path / "half.py"
    model.write_text(HALF_MODEL)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["audit", str(model), "-o", str(out), "--quiet", "--scenario", "prefill:seq=4+decode:past=4"])
    assert res.exit_code == 1, res.output
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["scenarios"]] == ["prefill"]
    assert data["failed_scenarios"][0]["name"] == "decode" and "RuntimeError" in data["failed_scenarios"][0]["reason"]
    assert "Traceback" not in res.stderr and "fake_tensor.py" not in res.stderr


def test_failed_scenario_shown_in_every_format(tmp_path):
    model = tmp_path / "half.py"
    model.write_text(HALF_MODEL)
    for ext in ("txt", "md", "html"):
        out = tmp_path / f"r.{ext}"
        res = CliRunner().invoke(cli, ["audit", str(model), "-o", str(out), "--quiet", "--scenario", "prefill:seq=4+decode:past=4"])
        assert res.exit_code == 1
        assert "could not be traced" in out.read_text(), ext
