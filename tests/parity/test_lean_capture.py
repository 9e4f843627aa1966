"""The lean stats-only recorder (forward wrappers) against the hook recorder, and the Triton statistics kernel
against the torch path.

The Triton tests run where Triton is importable: on a CUDA host on the GPU, elsewhere in Triton's CPU interpreter
(TRITON_INTERPRET=1, set before triton is imported). The project's CI installs no Triton (a 1 GB wheel), so there
they skip; the GPU host runs them (docs/parity.md).
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from npuport.devices.device import parse_device
from npuport.parity.capture import Capturer
from npuport.parity.entries import CaptureOptions
from npuport.parity.session import RunOptions, Target, device_inputs, modes_for, place, prepare
from npuport.parity.stats import _packed_group, _unpack

from .conftest import SCEN


def _capture(prep, opts: CaptureOptions, device: str = "cpu"):
    dev = parse_device(device)
    module = place(prep, dev)
    inputs = device_inputs(prep.inputs, dev)
    with Capturer(module, opts, modes_for(dev), dev.synchronize) as cap:
        return cap.lean, cap.step(inputs["args"], inputs["kwargs"])


@pytest.mark.parametrize("kind", ["hf", "file"])
def test_lean_and_hook_recorders_agree(kind, llama_config, model_file):
    target = Target(hf_config=str(llama_config)) if kind == "hf" else Target(model=model_file)
    prep = prepare(target, RunOptions(scenario=SCEN))
    lean, a = _capture(prep, CaptureOptions(mode="stats", op_sequence=False))
    hooks, b = _capture(prep, CaptureOptions(mode="stats", op_sequence=True))  # op sequence needs the module stack
    assert lean and not hooks
    assert [(e.key, e.order, tuple(e.shape), e.dtype) for e in a.entries] == [(e.key, e.order, tuple(e.shape), e.dtype) for e in b.entries]
    assert a.module_sequence == b.module_sequence and a.op_sequence is None and b.op_sequence
    for x, y in zip(a.entries, b.entries):
        sa, sb = a.stats[x.blob], b.stats[y.blob]
        assert sa.checksum == sb.checksum and sa.count == sb.count and sa.sample == sb.sample and sa.norm == sb.norm
    # a tensor seen twice is one blob on both paths
    assert len(a.stats) == len(b.stats) < len(a.entries)


def test_lean_capture_restores_forwards_and_outputs(llama_config):
    prep = prepare(Target(hf_config=str(llama_config)), RunOptions(scenario=SCEN))
    module, inputs = prep.lm.module, prep.inputs
    with torch.no_grad():
        before = module(*inputs["args"], **inputs["kwargs"]).logits
    lean, cap = _capture(prep, CaptureOptions(mode="stats", op_sequence=False))
    assert lean and cap.entries
    assert not any("forward" in m.__dict__ for m in module.modules())  # every wrapper removed
    with torch.no_grad():
        after = module(*inputs["args"], **inputs["kwargs"]).logits
    assert torch.equal(before, after)


def test_model_with_its_own_hooks_uses_the_hook_recorder(model_file):
    prep = prepare(Target(model=model_file), RunOptions(scenario=SCEN))
    seen: list[int] = []
    h = prep.lm.module.blocks[0].register_forward_hook(lambda m, a, o: seen.append(1))
    try:
        lean, cap = _capture(prep, CaptureOptions(mode="stats", op_sequence=False))
    finally:
        h.remove()
    assert not lean and seen == [1] and "blocks.0#0:out.y" in cap.by_key()


def test_forward_between_captured_steps_records_nothing(model_file):
    prep = prepare(Target(model=model_file), RunOptions(scenario=SCEN))
    dev = parse_device("cpu")
    module = place(prep, dev)
    args, kwargs = prep.inputs["args"], prep.inputs["kwargs"]
    for opts in (CaptureOptions(mode="stats", op_sequence=False), CaptureOptions(mode="full")):
        with Capturer(module, opts, modes_for(dev), dev.synchronize) as cap:
            first = cap.step(args, kwargs)
            n_entries, n_blobs = len(first.entries), len(first.stats) + len(first.full)
            with torch.no_grad():
                module(*args, **kwargs)  # uncaptured: must not append to the finished capture or keep tensors
            assert len(first.entries) == n_entries and len(first.stats) + len(first.full) == n_blobs
            second = cap.step(args, kwargs)
            assert [e.key for e in second.entries] == [e.key for e in first.entries]


INPLACE_PY = '''
import torch, torch.nn as nn

class Scale(nn.Module):
    def forward(self, x):
        return x.mul_(2.0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = Scale()
    def forward(self, x):
        return self.scale(self.fc(x))

def build_model():
    return Net()

def example_inputs(scenario):
    return {"x": torch.randn(scenario.batch, scenario.seq, 8)}
'''


def test_input_changed_in_place_is_marked_mutated_on_both_paths(tmp_path):
    path = tmp_path / "inplace.py"
    path.write_text(INPLACE_PY)
    prep = prepare(Target(model=str(path)), RunOptions(scenario=SCEN))
    for opts in (CaptureOptions(mode="stats", op_sequence=False), CaptureOptions(mode="stats", op_sequence=True)):
        _, cap = _capture(prep, opts)
        fc_out = cap.by_key()["fc#0:out"]
        assert cap.stats[fc_out.blob].mutated  # reduced after Scale doubled it in place: flagged, not silently wrong


# --- the Triton statistics kernel -----------------------------------------------------------------------------

_HAS_TRITON = importlib.util.find_spec("triton") is not None
_DEVICES = (["cuda"] if torch.cuda.is_available() else []) + (["interpreter"] if _HAS_TRITON and not torch.cuda.is_available() else [])


def _same(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


@pytest.mark.skipif(not _HAS_TRITON, reason="Triton not installed (CI installs none; the GPU host and a dev venv have it)")
@pytest.mark.parametrize("where", _DEVICES or ["none"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.int32, torch.uint8, torch.bool])
def test_triton_statistics_match_the_torch_path(where, dtype):
    if where == "interpreter":  # triton.jit reads the flag when triton and the kernels are first imported: a fresh process
        code = f"import torch; from tests.parity.test_lean_capture import _check_triton_rows; _check_triton_rows({dtype!s}, 'cpu')"
        env = dict(os.environ, TRITON_INTERPRET="1")
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        _check_triton_rows(dtype, "cuda")


def _check_triton_rows(dtype: torch.dtype, device: str) -> None:
    from npuport.parity import stats_triton

    if not dtype.is_floating_point:
        return _check_triton_integer_rows(dtype, device)
    g = torch.Generator().manual_seed(7)
    sizes = [1, 5, 63, 64, 1000, stats_triton.CHUNK, stats_triton.CHUNK + 1, 2 * stats_triton.CHUNK + 777]
    tensors = [(torch.randn(n, generator=g) * 3).to(dtype) for n in sizes]
    tensors[1][3] = float("nan")
    tensors[4][7] = float("inf")
    tensors[6][stats_triton.CHUNK] = -1e4  # the one element of the last, masked chunk
    tensors[7][100] = float("-inf")
    on_dev = [t.to(device) for t in tensors]
    rows = stats_triton.packed_rows([t.data_ptr() for t in on_dev], [t.numel() for t in on_dev], dtype, torch.device(device)).cpu()
    for t, row in zip(tensors, rows):
        got = _unpack(row, t.numel())
        ref = _unpack(_packed_group(t.reshape(1, -1))[0], t.numel())
        truth = t.double()
        assert _same(got.min, ref.min) and _same(got.max, ref.max), (t.numel(), got, ref)
        assert got.checksum == ref.checksum
        assert len(got.sample) == len(ref.sample) and all(_same(x, y) for x, y in zip(got.sample, ref.sample))
        for name, exact in (("sum", truth.sum().item()), ("norm", truth.norm().item())):
            v = getattr(got, name)
            assert _same(v, exact) or math.isclose(v, exact, rel_tol=1e-5, abs_tol=1e-3), (name, v, exact)


def _check_triton_integer_rows(dtype: torch.dtype, device: str) -> None:
    """Integers (ids, positions, masks) accumulate in float64 and checksum their values: every field equals the torch
    path's exactly while the sums stay below 2**53; the checksum also where int64 values wrap it around."""
    from npuport.parity import stats_triton

    g = torch.Generator().manual_seed(11)
    sizes = [1, 5, 64, 1000, stats_triton.CHUNK + 1, 2 * stats_triton.CHUNK + 777]
    if dtype == torch.bool:
        tensors = [torch.randint(0, 2, (n,), generator=g).bool() for n in sizes]
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -40000), min(info.max, 40000)
        tensors = [torch.randint(lo, hi + 1, (n,), generator=g).to(dtype) for n in sizes]
    if dtype == torch.int64:
        tensors.append(torch.tensor([2**62, 2**62, -(2**61), 3, 2**62], dtype=torch.int64))  # the word sum wraps
    on_dev = [t.to(device) for t in tensors]
    rows = stats_triton.packed_rows([t.data_ptr() for t in on_dev], [t.numel() for t in on_dev], dtype, torch.device(device)).cpu()
    for i, (t, row) in enumerate(zip(tensors, rows)):
        got = _unpack(row, t.numel())
        ref = _unpack(_packed_group(t.reshape(1, -1))[0], t.numel())
        if i < len(sizes):
            assert got == ref, (dtype, t.numel(), got, ref)
        else:
            assert got.checksum == ref.checksum and (got.min, got.max, got.sample) == (ref.min, ref.max, ref.sample)
            assert math.isclose(got.sum, ref.sum, rel_tol=1e-12) and math.isclose(got.norm, ref.norm, rel_tol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.cuda
def test_cuda_stats_capture_uses_triton_and_matches_torch(llama_config):
    prep = prepare(Target(hf_config=str(llama_config), dtype="bfloat16"), RunOptions(scenario=SCEN))
    _, a = _capture(prep, CaptureOptions(mode="stats", op_sequence=False, stats_kernel="triton"), "cuda")
    _, b = _capture(prep, CaptureOptions(mode="stats", op_sequence=False, stats_kernel="torch"), "cuda")
    assert a.stats_kernels == {"triton"} and b.stats_kernels == {"torch"}  # the int64 input ids too
    for x, y in zip(a.entries, b.entries):
        assert a.stats[x.blob].checksum == b.stats[y.blob].checksum
        if x.dtype == "int64":  # integers: every field the same on both paths
            assert a.stats[x.blob] == b.stats[y.blob], x.key




def test_stats_table_round_trip_and_overlay():
    from npuport.parity.stats import StatsBatcher, StatsTable, tensor_stats

    g = torch.Generator().manual_seed(3)
    tensors = {5: torch.randn(4, 7, generator=g), 2: torch.randn(3, generator=g).to(torch.bfloat16), 9: torch.arange(6)}
    batcher = StatsBatcher(fused=False)
    for blob, t in tensors.items():
        batcher.add(blob, t)
    table = batcher.finish()
    assert isinstance(table, StatsTable) and sorted(table) == [2, 5, 9] and len(table) == 3 and 5 in table and 4 not in table
    for blob, t in tensors.items():
        assert table[blob] == tensor_stats(t)  # the columns give back exactly what the one-tensor path computes
    extra = torch.tensor([1.0, float("nan")])
    table[4] = tensor_stats(extra)  # a full blob's statistics, computed later (Capture.stats_of)
    again = StatsTable.from_tensors(table.to_tensors())
    assert sorted(again) == [2, 4, 5, 9] and again[4].count == 2 and math.isnan(again[4].max)
    assert all(again[b] == table[b] for b in (2, 5, 9)) and again.ids.tolist() == [2, 4, 5, 9]
    with pytest.raises(KeyError):
        table[77]
    assert len(StatsTable.empty()) == 0 and not StatsTable.empty()


def test_wrapped_forward_keeps_its_signature(llama_config):
    import inspect

    prep = prepare(Target(hf_config=str(llama_config)), RunOptions(scenario=SCEN))
    module = prep.lm.module
    real = inspect.signature(module.forward)
    with Capturer(module, CaptureOptions(mode="stats", op_sequence=False), modes_for(parse_device("cpu")), lambda: None) as cap:
        assert cap.lean and "forward" in module.__dict__
        assert inspect.signature(module.forward) == real  # transformers inspects forward's parameters in places


def test_lean_flushes_keep_statistics_and_small_tensors_deduplicated(llama_config, monkeypatch):
    """A budget small enough to flush on almost every tensor gives the same statistics per entry as one flush at the
    end; the position ids every layer takes (small) stay one blob across those flushes."""
    prep = prepare(Target(hf_config=str(llama_config)), RunOptions(scenario=SCEN))
    _, big = _capture(prep, CaptureOptions(mode="stats", op_sequence=False))
    _, small = _capture(prep, CaptureOptions(mode="stats", op_sequence=False, budget_bytes=4096))
    assert [e.key for e in big.entries] == [e.key for e in small.entries]
    for x, y in zip(big.entries, small.entries):
        sa, sb = big.stats[x.blob], small.stats[y.blob]
        assert (sa.checksum, sa.count, sa.sample, sa.norm, sa.min, sa.max) == (sb.checksum, sb.count, sb.sample, sb.norm, sb.min, sb.max), x.key
    pos = {e.blob for e in small.entries if e.leaf == ".kwargs.position_ids"}
    assert len(pos) == 1 and len([e for e in small.entries if e.leaf == ".kwargs.position_ids"]) > 2
    # larger tensors are let go at each flush, so one seen before and after a flush gets a second blob
    monkeypatch.setattr("npuport.parity.recorders._SMALL", 0)
    _, none_kept = _capture(prep, CaptureOptions(mode="stats", op_sequence=False, budget_bytes=4096))
    assert len(none_kept.stats) > len(small.stats) == len(big.stats)
    assert len({e.blob for e in none_kept.entries if e.leaf == ".kwargs.position_ids"}) > 1


def test_steady_steps_reuse_the_layout_only_when_it_matches(llama_config):
    """Capturing every step of a loop: the second step's entries are the first's objects (not rebuilt) when the calls
    and shapes match, and its statistics are its own; a step with another shape rebuilds them."""
    prep = prepare(Target(hf_config=str(llama_config)), RunOptions(scenario=SCEN))
    dev = parse_device("cpu")
    module = place(prep, dev)
    args, kwargs = prep.inputs["args"], prep.inputs["kwargs"]
    ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
    other = (ids + 1) % 256
    swap = (lambda t: ((t,) + tuple(args[1:]), kwargs)) if "input_ids" not in kwargs else (lambda t: (args, {**kwargs, "input_ids": t}))
    with Capturer(module, CaptureOptions(mode="stats", op_sequence=False), modes_for(dev), dev.synchronize) as cap:
        first = cap.step(args, kwargs)
        second = cap.step(*swap(other))
        shorter = cap.step(*swap(other[..., :-1]))
    assert all(x is y for x, y in zip(first.entries, second.entries)) and len(first.entries) == len(second.entries)
    assert second.module_sequence == first.module_sequence and second.module_sequence is not first.module_sequence
    logits = first.by_key()["<model>#0:out.logits"]
    assert first.stats[logits.blob].checksum != second.stats[logits.blob].checksum  # new inputs, new statistics
    assert shorter.by_key()["<model>#0:out.logits"].shape[-2] == logits.shape[-2] - 1
    assert not any(x is y for x, y in zip(first.entries, shorter.entries))


@pytest.mark.parametrize("op_sequence", [False, True])  # lean recorder, hook recorder
def test_automatic_budget_is_resolved_once_per_capturer(llama_config, monkeypatch, op_sequence):
    """The automatic budget reads allocator statistics (costly on CUDA): the first step of a Capturer resolves it, later
    steps reuse it; a budget given explicitly is never replaced."""
    from npuport.parity import stats

    asked: list[torch.device] = []

    def fake(device: torch.device) -> int:
        asked.append(device)
        return 1 << 20  # small enough to flush during the step
    monkeypatch.setattr(stats, "auto_budget", fake)
    prep = prepare(Target(hf_config=str(llama_config)), RunOptions(scenario=SCEN))
    dev = parse_device("cpu")
    module = place(prep, dev)
    args, kwargs = prep.inputs["args"], prep.inputs["kwargs"]
    with Capturer(module, CaptureOptions(mode="stats", op_sequence=op_sequence), modes_for(dev), dev.synchronize) as cap:
        first, second = cap.step(args, kwargs), cap.step(args, kwargs)
        assert cap.lean is not op_sequence and cap._step_opts().budget_bytes == 1 << 20
    assert len(asked) == 1 and asked[0].type == "cpu"
    assert [first.stats[e.blob] for e in first.entries] == [second.stats[e.blob] for e in second.entries]
    with Capturer(module, CaptureOptions(mode="stats", op_sequence=op_sequence, budget_bytes=4096), modes_for(dev), dev.synchronize) as cap:
        cap.step(args, kwargs)
        assert cap._step_opts().budget_bytes == 4096
    assert len(asked) == 1
