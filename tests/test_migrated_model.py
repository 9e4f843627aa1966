"""A model that already calls torch_npu ops audits here, in a fresh interpreter (npu:: registrations are global)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parent / "fixtures" / "models"
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a whole audit in a fresh interpreter
def test_migrated_model_audits_with_npu_ops(tmp_path):
    pytest.importorskip("npuport.coverage.npu_ops")
    out = tmp_path / "a.json"
    proc = subprocess.run([sys.executable, "-m", "npuport.cli.main", "audit", str(FIX / "migrated.py"), "--quiet",
                           "--scenario", "prefill:batch=2,seq=16", "-o", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    ops = {o["op"]: o for o in data["ops"]}
    assert "npu::npu_rms_norm" in ops and "npu::npu_swiglu" in ops
    sw = ops["npu::npu_swiglu"]["scenarios"]["prefill"]["shapes"][0]["inputs"]
    assert sw == "2x16x256"
    assert ops["npu::npu_rms_norm"]["coverage"]["status"] == "npu-custom"
    assert ops["npu::npu_rms_norm"]["fused"]
