"""The torch.compile candidate: one compile per case from a fresh dynamo state, recompiles refused and reported,
the compiler's logs and warnings off stderr unless asked for.

On the CPU with backend "aot_eager" (BenchOptions.compile_backend, for tests): dynamo and AOTAutograd run as they
do for inductor - same tracing, guards, caches and recompile accounting - without inductor's C++ build per op
(about 2 s an op here, 40 s for the first). The inductor run through the CLI is the slow test at the end.
"""

from __future__ import annotations

import copy
import io
import logging
import re
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console
from torch._dynamo.utils import counters

from npuport.bench import harness
from npuport.bench.cases import cases_from_report
from npuport.bench.harness import BenchOptions, bench_case
from npuport.bench.json_form import bench_to_json
from npuport.bench.rebuild import Runnable, build
from npuport.bench.runner import run_bench
from npuport.devices.timer import HostClock
from npuport.render.bench_text import render_text
from npuport.trace import compiler_logs

GPT = str(Path(__file__).resolve().parents[2] / "examples" / "gpt" / "model.py")
QUICK = dict(warmup=1, reps=5, min_reps=3, budget_s=0.05, rotate_bytes=1 << 20, alternatives=False, kernel_check=False)
COMPILER_LINE = re.compile(r"torch[/.]_(dynamo|inductor|functorch)|torchdynamo|recompil", re.I)


@pytest.fixture(autouse=True)
def _no_torch_logs(monkeypatch):
    monkeypatch.delenv("TORCH_LOGS", raising=False)  # TORCH_LOGS set by whoever runs the tests would win


@contextmanager
def torch_stderr() -> Iterator[io.StringIO]:
    """stderr as a string, torch's log handlers included (they hold the stream they were made with)."""
    buf, before = io.StringIO(), sys.stderr
    sys.stderr = buf
    torch._logging._internal._init_logs()
    try:
        yield buf
    finally:
        sys.stderr = before
        torch._logging._internal._init_logs()


def _graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


def _compile(r) -> harness.CandidateResult:
    return next(c for c in r.candidates if c.name == "compile")


def test_every_op_of_the_example_compiles_once_and_stderr_stays_clean():
    # every op of the prefill (top=0), under a recompile limit of 1: a case compiled on top of the last one's dynamo
    # state is a recompile and fails. Before the per-case reset all cases shared one code object: with the default
    # limit (8) the 9th case on was "compile n/a", here the 2nd would be.
    opts = BenchOptions(compile=True, compile_backend="aot_eager", **QUICK)
    graphs = _graphs()
    with torch_stderr() as err, warnings.catch_warnings(record=True) as seen, \
            torch._dynamo.config.patch(recompile_limit=1):
        warnings.simplefilter("always")
        rep = run_bench(model=GPT, scenario="prefill:batch=1,seq=32", top=0, shapes=1, device="cpu", options=opts, e2e=False)
    assert len(rep.results) == 8 and "aten::addmm" in {r.case.op for r in rep.results}
    for r in rep.results:
        c = _compile(r)
        assert c.measurement is not None and c.ratio_to_eager, (r.case.label, c.skipped)
        assert c.recompiles == 0 and c.note.startswith("compiled once"), (r.case.label, c.note)
    assert _graphs() - graphs == len(rep.results)  # dynamo's own counter: one graph per case, none recompiled
    console = Console(record=True, width=400, file=io.StringIO())
    render_text(bench_to_json(rep), console)
    text = console.export_text()
    assert text.count("compile ") >= len(rep.results) and "compile n/a" not in text
    assert not [ln for ln in err.getvalue().splitlines() if COMPILER_LINE.search(ln)], err.getvalue()
    assert not [w for w in seen if COMPILER_LINE.search(w.filename)]


def test_debug_logs_each_compile_once_then_restores_torch_logging():
    opts = BenchOptions(compile=True, compile_backend="aot_eager", debug=True, **QUICK)
    level = logging.getLogger("torch._dynamo").level
    state = copy.deepcopy(torch._logging._internal._get_log_state())
    with torch_stderr() as err:
        rep = run_bench(model=GPT, scenario="prefill:batch=1,seq=32", top=2, shapes=1, device="cpu", options=opts, e2e=False)
    lines = err.getvalue().splitlines()
    starts = [ln for ln in lines if "torchdynamo start tracing" in ln]
    assert len(starts) == len(rep.results) == 2, err.getvalue()
    # compile id [frame/attempt]: every case is frame 0, attempt 0 of a fresh dynamo state - never a recompile
    assert {m for ln in starts for m in re.findall(r"\[\d+/\d+\]", ln)} == {"[0/0]"}
    assert all(_compile(r).recompiles == 0 for r in rep.results)
    assert logging.getLogger("torch._dynamo").level == level
    assert torch._logging._internal._get_log_state() == state


def _warn_from(module: str) -> None:
    exec("import warnings\nwarnings.warn('from the compiler')", {"__name__": module})


def test_compiler_output_is_scoped_and_restored():
    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch._inductor", "torch._dynamo.convert_frame")]
    before = [lg.level for lg in loggers]
    with torch_stderr() as err, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with compiler_logs.compiler_output(debug=False):
            logging.getLogger("torch._dynamo.convert_frame").warning("hit config.recompile_limit")
            logging.getLogger("torch._inductor.made_later").warning("inductor says")
            _warn_from("torch._inductor.compile_fx")
            _warn_from("npuport.elsewhere")  # not the compiler's: kept
        assert err.getvalue() == "" and [str(w.message) for w in seen] == ["from the compiler"]
        assert [lg.level for lg in loggers] == before
        logging.getLogger("torch._dynamo.convert_frame").warning("after the run")
        _warn_from("torch._inductor.compile_fx")
    assert "after the run" in err.getvalue() and len(seen) == 2


def test_torch_logs_set_by_the_user_stand(monkeypatch):
    monkeypatch.setenv("TORCH_LOGS", "recompiles")
    level = logging.getLogger("torch._dynamo").level
    with compiler_logs.compiler_output(debug=False):
        assert logging.getLogger("torch._dynamo").level == level


def test_a_recompile_is_refused_counted_and_reported(tiny_audit, monkeypatch):
    cases, _ = cases_from_report(tiny_audit, "prefill", top=1, shapes=1)
    assert cases[0].op == "aten::mm"

    def build_with_odd_set(case, device, sets, seed) -> Runnable:
        r = build(case, device, max(sets, 2), seed)
        a = r.tensor_sets[1][0]
        r.tensor_sets[1][0] = a.t().contiguous().t()  # same shape and dtype, column-major: a guard fails
        return r

    monkeypatch.setattr(harness, "build", build_with_odd_set)
    graphs = _graphs()
    opts = BenchOptions(compile=True, compile_backend="aot_eager", **QUICK)
    res = bench_case(cases[0], "cpu", HostClock(), opts, None, 1 << 30)
    c = _compile(res)
    assert res.eager is not None and c.measurement is None and c.recompiles == 1
    assert c.skipped and "recompile refused" in c.skipped and "stride mismatch" in c.skipped
    assert c.to_json()["recompiles"] == 1 and _graphs() - graphs == 1  # the second compile never ran


@pytest.mark.slow  # inductor builds C++ per op on the cpu: about 15 s warm, 50 s with an empty inductor cache
def test_cli_compiles_with_inductor_and_keeps_stderr_clean(tiny_llama):
    from npuport.cli.main import cli

    with torch_stderr() as err:
        res = CliRunner().invoke(cli, ["bench", "--hf", str(tiny_llama), "--scenario", "prefill:batch=1,seq=32", "--ops", "3",
                                       "--shapes", "1", "--device", "cpu", "--candidates", "eager,compile", "--no-e2e",
                                       "--no-kernel-check", "--reps", "5", "--warmup", "1", "--budget", "0.05",
                                       "--rotate-mb", "1", "--wide"])
    assert res.exit_code == 0, res.output
    assert res.output.count("compile ") >= 3 and "compile n/a" not in res.output
    assert not [ln for ln in (res.stderr + err.getvalue()).splitlines() if COMPILER_LINE.search(ln)], res.stderr
