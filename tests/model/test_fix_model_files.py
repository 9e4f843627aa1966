"""Model files as third-party repositories write them (gpt-fast, litgpt, Meta's llama / llama3, torchtitan): a
torch.compile'd helper called while the inputs are made, `.cuda()` in the model code, a context limit kept as
`config.block_size`. Each ran into the audit's fake tensors in a way the user could not act on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch._subclasses.fake_tensor import FakeTensorMode

from npuport.audit.trace_stage import trace_scenario
from npuport.cli.main import cli
from npuport.errors import NpuportError
from npuport.model.loading import load_model_file
from npuport.model.scenarios import DEFAULTS, parse_scenario

ROOT = Path(__file__).resolve().parents[2]

# torchtitan's get_attention_masks: a torch.compile'd function called from example_inputs on a fake tensor. Inductor's
# compiled code reads the tensor's data pointer, which a fake tensor does not have: the process died (SIGSEGV).
COMPILED = """
import torch, torch.nn as nn

@torch.compile
def doc_mask(pos):
    return pos[:, None] >= pos[None, :]

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(64, 64)
        self.register_buffer("m", doc_mask(torch.arange(4)))   # a compiled call in build_model too
    def forward(self, x, mask):
        return self.l(x).masked_fill(~mask[:, :1], 0.0)

def build_model():
    return M()

def example_inputs(sc):
    return (torch.randn(sc.batch, sc.seq, 64), doc_mask(torch.arange(sc.seq)))
"""

# run in a child process: before the fix the failure was a segfault, which would take pytest down with it
PROBE = """
import json, sys, torch
from npuport.model.loading import load_model_file
from npuport.model.scenarios import parse_scenario
lm = load_model_file(sys.argv[1])
args, kwargs = lm.make_inputs(parse_scenario("prefill:batch=1,seq=16"))
import torch._dynamo
print(json.dumps({"shape": list(args[-1].shape), "notes": lm.notes, "disable": torch._dynamo.config.disable}))
"""


def _probe(path: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_compiled_helper_in_build_and_inputs_runs_eagerly(tmp_path: Path) -> None:
    model = tmp_path / "compiled.py"
    model.write_text(COMPILED, encoding="utf-8")
    got = _probe(model)
    assert got["shape"] == [16, 16]
    assert got["disable"] is False  # dynamo is switched back on after the user's calls
    assert any("torch.compile" in n and "eagerly" in n for n in got["notes"]), got["notes"]


def test_compiled_helper_audit_cli(tmp_path: Path) -> None:
    model = tmp_path / "compiled.py"
    model.write_text(COMPILED, encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "npuport", "audit", str(model), "--scenario", "prefill:batch=1,seq=16",
                          "--format", "json", "--quiet"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    assert json.loads(res.stdout)["scenarios"][0]["name"] == "prefill"


# Meta's llama / llama3 model.py: a KV cache made with .cuda() in __init__, moved to the activations in forward
CUDA_CACHE = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(64, 64)
        self.cache = torch.zeros(1, 16, 64).cuda()
    def forward(self, x):
        return self.l(x) + self.cache.to(x)[:, : x.shape[1]]
def build_model():
    assert not torch.cuda.is_available()   # the branch a CPU run takes stays the branch the audit takes
    return M()
def example_inputs(sc):
    return (torch.randn(sc.batch, sc.seq, 64),)
"""

# M().cuda() in build_model, .cuda() in example_inputs and in the forward
CUDA_MODULE = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(64, 64)
        self.register_buffer("scale", torch.ones(64))
    def forward(self, x, bias):
        mask = torch.ones(x.shape[1], x.shape[1]).tril().cuda(0)
        return (self.l(x) * self.scale + bias) @ x.transpose(1, 2) * mask
def build_model():
    _built.append(M().cuda())
    return _built[0]
def example_inputs(sc):
    _built[0].cuda()   # a module moved again once built (fake parameters cannot be swapped then)
    return (torch.randn(sc.batch, sc.seq, 64), torch.zeros(64).cuda())
_built = []
"""


MODULE_CUDA = torch.nn.Module.cuda


def _cuda_untouched() -> bool:
    return "cuda" not in torch.Tensor.__dict__ and torch.nn.Module.cuda is MODULE_CUDA


def test_cuda_call_in_init_builds_on_the_fake_cuda_device(tmp_path: Path) -> None:
    model = tmp_path / "cache.py"
    model.write_text(CUDA_CACHE, encoding="utf-8")
    lm = load_model_file(model)
    with lm.mode:  # the device the audit models: where a tensor made without device= is, as the inputs are
        assert lm.module.cache.device == torch.empty(0).device
    trace, _ = trace_scenario(lm, parse_scenario("prefill:batch=1,seq=8"))
    # a GPU run moves nothing in `self.cache.to(x)`: neither does the trace (no copy between two fake devices)
    assert trace is not None and not [c for c in trace.calls if c.op == "aten::_to_copy"]
    assert _cuda_untouched()  # nothing patched is left behind
    note = [n for n in lm.notes if ".cuda()" in n]
    assert len(note) == 1 and "cache.py:7" in note[0], lm.notes


def test_module_cuda_and_cuda_in_inputs_and_forward(tmp_path: Path) -> None:
    model = tmp_path / "moved.py"
    model.write_text(CUDA_MODULE + "def loss_fn(out, inputs):\n    return out.sum()\n", encoding="utf-8")
    lm = load_model_file(model)
    assert isinstance(lm.module.l.weight, torch.nn.Parameter)
    assert any(".cuda()" in n and "moved.py:12" in n for n in lm.notes), lm.notes  # M().cuda() in build_model
    res = CliRunner().invoke(cli, ["audit", str(model), "--scenario", "prefill:batch=1,seq=16", "--scenario",
                                   "train:batch=1,seq=16", "--format", "json", "--quiet"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)  # the training step's backward ran: fake CUDA tensors would abort it here
    assert [s["name"] for s in data["scenarios"]] == ["prefill", "train"]
    assert any(".cuda()" in n and "moved.py:12" in n for n in data["notes"]), data["notes"]
    assert _cuda_untouched()


def test_cuda_sites_from_inputs_forward_and_loss_join_the_note(tmp_path: Path) -> None:
    model = tmp_path / "moved.py"
    model.write_text(CUDA_MODULE + "def loss_fn(out, inputs):\n    return out.float().cuda().sum()\n", encoding="utf-8")
    lm = load_model_file(model)
    assert type(lm.mode) is FakeTensorMode  # higher-order ops (flex attention) find their rule by the exact type
    for name in ("prefill:batch=1,seq=8", "train:batch=1,seq=8"):
        trace, _ = trace_scenario(lm, parse_scenario(name))
        assert trace is not None
    note = next(n for n in lm.notes if ".cuda()" in n)
    assert all(f"moved.py:{line}" in note for line in (12, 15, 16, 9, 19)), note
    assert _cuda_untouched()


def test_cuda_is_put_back_when_the_forward_raises(tmp_path: Path) -> None:
    model = tmp_path / "raises.py"
    model.write_text(CUDA_CACHE.replace("return self.l(x)", "x.cuda()\n        raise ValueError('no')\n        return self.l(x)"),
                     encoding="utf-8")
    lm = load_model_file(model)
    with pytest.raises(NpuportError, match="ValueError: no"):
        trace_scenario(lm, parse_scenario("prefill:batch=1,seq=8"))
    assert _cuda_untouched()


def test_cuda_failure_is_still_one_line_for_real_runs(tmp_path: Path) -> None:
    """Real tensors (bench, parity) keep torch's own .cuda(): nothing is patched when the model is not fake."""
    model = tmp_path / "cache.py"
    model.write_text(CUDA_CACHE, encoding="utf-8")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: .cuda() works for real")
    with pytest.raises(NpuportError, match="build_model"):
        load_model_file(model, fake=False)
    assert _cuda_untouched()


# litgpt and nanoGPT keep the context limit as config.block_size; litgpt's example_inputs for the default decode
# (4096 tokens of context + 1) raised "Cannot attend to 4097, block size is only 4096"
BLOCK_SIZE = """
import torch, torch.nn as nn
from dataclasses import dataclass
@dataclass
class Config:
    block_size: int = 64
    n_embd: int = 8
class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.l = nn.Linear(8, 8)
    def forward(self, x):
        return self.l(x)
def build_model():
    return GPT()
def example_inputs(sc):
    return (torch.randn(sc.batch, sc.seq, 8),)
"""

OVERFLOW = """
import torch, torch.nn as nn
def build_model():
    return nn.Linear(8, 8)
def example_inputs(sc):
    if sc.past + sc.seq > 4096:
        raise ValueError(f"Cannot attend to {sc.past + sc.seq}, block size is only 4096. This is likely because the "
                         "input text exceeds the supported context length of this model.")
    if sc.batch > 64:
        raise ValueError("batch too large")
    return (torch.randn(sc.batch, sc.seq, 8),)
"""


def test_block_size_is_the_context_limit(tmp_path: Path) -> None:
    model = tmp_path / "nanogpt.py"
    model.write_text(BLOCK_SIZE, encoding="utf-8")
    assert load_model_file(model).max_positions == 64
    own = tmp_path / "own.py"  # MAX_POSITIONS in the file wins over the config's block_size
    own.write_text(BLOCK_SIZE + "MAX_POSITIONS = 32\n", encoding="utf-8")
    assert load_model_file(own).max_positions == 32


def test_block_size_of_a_transformers_config_is_not_a_context_limit(tmp_path: Path) -> None:
    # BigBird's block_size is its sparse attention's block (64 tokens), not a context limit
    model = tmp_path / "hfish.py"
    model.write_text(BLOCK_SIZE.replace("class Config:", "class Config:\n    __module__ = 'transformers.models.x'"),
                     encoding="utf-8")
    assert load_model_file(model).max_positions is None


def test_context_overflow_suggests_max_positions(tmp_path: Path) -> None:
    model = tmp_path / "overflow.py"
    model.write_text(OVERFLOW, encoding="utf-8")
    lm = load_model_file(model)
    with pytest.raises(NpuportError) as err:
        lm.make_inputs(DEFAULTS["decode"])
    text = err.value.render()
    assert "MAX_POSITIONS" in text and "Cannot attend to 4097" in text and "\n" not in text
    with pytest.raises(NpuportError) as other:  # an error that says nothing of the context: no suggestion
        lm.make_inputs(parse_scenario("prefill:batch=65,seq=8"))
    assert "MAX_POSITIONS" not in other.value.render()
    with pytest.raises(NpuportError) as asked:  # sizes the user gave: they know the context they asked for
        lm.make_inputs(parse_scenario("decode:past=5000"))
    assert "MAX_POSITIONS" not in asked.value.render()
    (tmp_path / "limited.py").write_text(OVERFLOW + "MAX_POSITIONS = 4096\n", encoding="utf-8")
    res = CliRunner().invoke(cli, ["audit", str(tmp_path / "limited.py"), "--scenario", "decode", "--format", "json",
                                   "--quiet"])
    assert res.exit_code == 0, res.output


def test_a_forward_that_asserts_its_context_suggests_max_positions(tmp_path: Path) -> None:
    """nanoGPT's forward asserts the sequence fits its block_size-less config: the trace's failure carries the hint."""
    model = tmp_path / "asserts.py"
    model.write_text("""import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__(); self.e = nn.Embedding(100, 32); self.pos = nn.Embedding(1024, 32)
    def forward(self, idx):
        t = idx.shape[1]
        assert t <= 1024, f"Cannot forward sequence of length {t}, block size is only 1024"
        return self.e(idx) + self.pos(torch.arange(t))
def build_model(): return M()
def example_inputs(sc): return (torch.randint(0, 100, (sc.batch, sc.seq + sc.past)),)
""", encoding="utf-8")
    res = CliRunner().invoke(cli, ["audit", str(model), "--scenario", "prefill", "--quiet"])
    assert res.exit_code == 2
    assert "MAX_POSITIONS" in res.stderr and "block size is only 1024" in res.stderr, res.stderr
    res = CliRunner().invoke(cli, ["audit", str(model), "--scenario", "prefill:seq=2048", "--quiet"])
    assert res.exit_code == 2 and "MAX_POSITIONS" not in res.stderr  # a size the user asked for
