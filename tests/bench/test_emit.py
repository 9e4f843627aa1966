"""--emit: each script runs on the CPU without npuport and prints a time."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from npuport.bench.cases import cases_from_report
from npuport.bench.emit import call_source, emit_scripts


@pytest.mark.slow  # one fresh interpreter per emitted script
def test_emitted_scripts_run_standalone(tiny_audit, tmp_path):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    picked = [c for c in cases if c.op in ("aten::mm", "aten::scaled_dot_product_attention")] + \
        [c for c in cases if c.op not in ("aten::mm", "aten::scaled_dot_product_attention")][:1]
    paths = emit_scripts([(c, "median 1.0 ms on test") for c in picked], tmp_path / "repro", "Model tiny, scenario prefill.")
    assert len(paths) == len(picked) >= 3
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for path in paths:
        text = path.read_text()
        assert "npuport" not in re.sub(r"(written by|from) `?npuport bench`?|\[bench:", "", text).split('"""', 2)[2]
        out = subprocess.run([sys.executable, "-I", str(path), "--device", "cpu", "--reps", "3", "--warmup", "1"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert re.search(r"median \d+\.\d+ ms", out.stdout), out.stdout


def test_call_source_keeps_recorded_arguments(tiny_audit):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=10, shapes=1)
    sdpa = next(c for c in cases if c.op == "aten::scaled_dot_product_attention")
    src = call_source(sdpa)
    assert src.startswith("torch.ops.aten.scaled_dot_product_attention.default(t[0], t[1], t[2]")
    assert "is_causal=True" in src
