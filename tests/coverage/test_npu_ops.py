"""The torch_npu stand-in: already-migrated code traces on fake tensors without an NPU.

The checks run in a fresh interpreter (npu_ops_probe.py): npu:: registrations are process-wide and other test
modules register their own stand-ins under the same names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from npuport.coverage import meta_kernels
from tests.coverage.conftest import ROOT


@pytest.fixture(scope="module")
def seen() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NPUPORT_MAPPINGS", None)
    proc = subprocess.run([sys.executable, "-m", "tests.coverage.npu_ops_probe"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_migrated_model_traces_on_fake_tensors(seen):
    assert seen["before"] is False
    assert seen["model_out"] == [2, 16, 64]  # rms_norm, rotary, fusion_attention, add_rms_norm, swiglu, .npu()
    assert seen["npu_available"] is False
    assert seen["find_spec"] is True and seen["transformers_npu"] is False
    assert seen["installed"] == [False, True]


def test_shapes_of_known_ops(seen):
    assert seen["rms"] == [[3, 5, 64], "torch.bfloat16", [3, 5, 1], "torch.float32"]
    assert seen["swiglu"] == [2, 10]
    assert seen["fa_bsh"] == [[2, 7, 128], [2, 8, 7, 8], [2, 8, 7, 8], [0], 0, 0, 0]
    assert seen["fa_bnsd"][:2] == [[2, 8, 7, 32], [2, 8, 7, 8]]
    assert seen["moe"] == [[6, 2], "torch.int32"]
    assert seen["gelu"] == [3]


def test_schemas_come_from_the_checked_in_data(seen):
    assert set(seen["custom_2_13"]) <= set(seen["defined"])
    assert seen["schema"].startswith("npu::npu_rms_norm(Tensor self, Tensor gamma, float epsilon=")
    assert {f"npu::{n}" for n in seen["meta_names"]} <= set(seen["custom_2_13"])
    assert seen["old_version"] == "2.1.0.post10"


def test_reentrant_and_undone(seen):
    assert seen["reentrant_same"] and seen["inner_exit_keeps"]
    assert "no 'not_an_op'" in seen["missing_attr"]
    assert seen["after"] == {"module": False, "torch.npu": False, "Tensor.npu": False, "Module.npu": False}


def test_a_real_module_wins(seen):
    assert seen["real_wins"] and seen["forced_fake"] and seen["real_restored"]


def test_duplicate_meta_registration_is_rejected():
    with pytest.raises(RuntimeError, match="duplicate meta kernel"):
        meta_kernels.meta("npu_rms_norm")(lambda *a: None)
