"""Identical layers recorded once (npuport.trace.reuse): the trace with reuse is the trace without it, call for call,
module for module, with the same dataflow between calls; and the audit's output is the same on every shipped config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from npuport.trace.memory import MemoryTracker
from npuport.trace.recorder import Recorder
from npuport.trace.reuse import groups_of, structure_key
from npuport.trace.run import new_fake_mode

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "examples" / "configs").glob("*.json"))


class Block(nn.Module):
    def __init__(self, dim: int, layer_idx: int, gated: bool = False) -> None:
        super().__init__()
        self.layer_idx = layer_idx  # differs between otherwise identical layers
        self.gated = gated
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        h = self.up(self.norm(x))
        h = F.silu(h) * h if self.gated else F.gelu(h)
        q = h[..., : x.shape[-1]].unsqueeze(1)
        attn = F.scaled_dot_product_attention(q, q, q, is_causal=True).squeeze(1)
        return x + self.down(h) * scale + attn


class Net(nn.Module):
    def __init__(self, dim: int = 16, shared: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, dim)
        # four plain layers, two gated ones (another configuration: a group of their own)
        self.layers = nn.ModuleList([Block(dim, i, gated=i in (2, 4)) for i in range(6)])
        self.scale = nn.Parameter(torch.ones(dim), requires_grad=shared)  # passed into every layer
        self.head = nn.Linear(dim, 50)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            # the last layer sees a longer sequence: its input signature differs, so it is recorded, not copied
            x = layer(torch.cat([x, x[:, :1]], dim=1) if i == 5 else x, self.scale)
        return self.head(x)


def _trace(train: bool, reuse: bool, fake=None, shared: bool = False):
    fake = fake or new_fake_mode()
    with fake:
        torch.manual_seed(0)
        net = Net(shared=shared)
        ids = torch.randint(0, 50, (2, 8))
    with fake, Recorder(net, "train" if train else "prefill", reuse=reuse) as rec, MemoryTracker(rec.stack, rec) as mem:
        mem.seed(net, [ids])
        if train:
            out = net(ids).float().sum()
            mem.forward_done()
            rec.backward(out)
        else:
            with torch.no_grad():
                out = net(ids)
        rec.trace.memory = mem.finish(net)
    return rec.trace


def _shape(t):
    return (t.shape, t.dtype, t.stride)


def _flow(trace) -> list[tuple]:
    """Per call: op, phase, module, source, shapes, args and, per input, the index of the call that produced it (by id)."""
    producer: dict[int, int] = {}
    out = []
    for c in trace.calls:
        out.append((c.op, c.phase, c.module, c.source, c.api, tuple(map(_shape, c.inputs)), tuple(map(_shape, c.outputs)),
                    c.args, tuple(sorted(c.kwargs.items())), trace.frames[c.frame].op if c.frame is not None else None,
                    tuple(producer.get(t.id) for t in c.inputs)))
        for t in c.outputs:
            producer[t.id] = c.index
    return out


def test_groups_are_layers_of_one_structure() -> None:
    net = Net()
    groups = groups_of(net)
    plain = [net.layers[i] for i in (0, 1, 3, 5)]
    gated = [net.layers[i] for i in (2, 4)]
    assert set(groups) == set(plain + gated)
    assert len({groups[m] for m in plain}) == 1 and len({groups[m] for m in gated}) == 1
    assert groups[plain[0]] != groups[gated[0]]
    # the layer's own index does not count; its configuration does
    assert structure_key(Block(16, 0)) == structure_key(Block(16, 7))
    assert structure_key(Block(16, 0)) != structure_key(Block(16, 0, gated=True))
    assert structure_key(Block(16, 0)) != structure_key(Block(32, 0))


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_reused_trace_is_the_recorded_trace(train: bool) -> None:
    full = _trace(train, reuse=False)
    reused = _trace(train, reuse=True)
    # layers 1 and 3 copy layer 0, layer 4 copies layer 2; layer 5 (a longer input) is recorded
    assert reused.reused == 3 and full.reused == 0
    # the copies do not run: their outputs (and in training their gradients) are made, their memory replayed
    assert reused.skipped == 3
    assert reused.memory.to_json() == full.memory.to_json()
    assert reused.memory.peak > reused.memory.weights
    assert len(reused.calls) == len(full.calls)
    assert [c.index for c in reused.calls] == list(range(len(reused.calls)))
    assert _flow(reused) == _flow(full)
    if train:  # every layer's backward is there, in the recorded order
        bwd = [c.module for c in reused.calls if c.phase == "backward" and c.module.startswith("layers.")]
        assert {m.split(".")[1] for m in bwd} == {str(i) for i in range(6)}
    # the copies' composite frames are their own, named by their module
    sdpa = [f.module for f in reused.frames.values() if f.op.endswith("scaled_dot_product_attention")]
    assert sorted(sdpa) == [f"layers.{i}" for i in range(6)]


def test_a_gradient_summed_across_layers_keeps_everything_but_its_links() -> None:
    """A weight passed into every layer (not one of its own): its gradient is summed across the layers, and between
    skipped layers that running sum is a tensor no op of theirs showed: the calls, their order, shapes and the memory
    are the recorded ones; only the link from one layer's partial sum to the next is not."""
    full = _trace(True, reuse=False, shared=True)
    reused = _trace(True, reuse=True, shared=True)
    a, b = _flow(full), _flow(reused)
    assert [x[:-1] for x in a] == [y[:-1] for y in b]
    differ = [x for x, y in zip(a, b) if x[-1] != y[-1]]
    assert differ and all(x[0] == "aten::add.Tensor" and x[1] == "backward" for x in differ)
    assert reused.memory.to_json() == full.memory.to_json()


def test_audit_is_the_same_without_reuse(tmp_path: Path) -> None:
    from npuport.api import audit_model

    model = tmp_path / "model.py"
    model.write_text(
        "import torch\n"
        f"from {__name__} import Net\n"
        "def build_model():\n    return Net()\n"
        "def example_inputs(scenario):\n    return (torch.randint(0, 50, (2, 8)),), {}\n"
        "def loss_fn(output, inputs):\n    return output.float().sum()\n")
    a = audit_model(model=str(model), scenarios=["train", "prefill"])
    b = audit_model(model=str(model), scenarios=["train", "prefill"], reuse=False)
    assert a[0].traces["train"].reused == 3 and b[0].traces["train"].reused == 0
    for d in (a[1], b[1]):
        d.pop("timings", None)
    assert a[1] == b[1]


def _cut(config: Path, tmp: Path) -> Path:
    from npuport.model.hf.zoo import cut_layers

    out = tmp / config.name
    out.write_text(json.dumps(cut_layers(json.loads(config.read_text()), 6)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_shipped_config_audits_the_same_with_and_without_reuse(config: Path, tmp_path: Path) -> None:
    """Six layers of each shipped config (hybrids keep each kind of layer; MoE configs their dense ones), the default
    scenarios: the audit's JSON is the same either way, and layers were copied in every scenario."""
    pytest.importorskip("transformers")
    from npuport.api import audit_model

    cut = _cut(config, tmp_path)
    a = audit_model(hf_config=str(cut))
    b = audit_model(hf_config=str(cut), reuse=False)
    assert all(t.reused > 0 for t in a[0].traces.values())
    assert all(t.skipped == t.reused for name, t in a[0].traces.items() if name != "train")
    assert all(t.reused == 0 for t in b[0].traces.values())
    for d in (a[1], b[1]):
        d.pop("timings", None)
    assert a[1] == b[1]


def test_host_routing_moe_audits_the_same_with_and_without_reuse(tmp_path: Path) -> None:
    """JetMoE reads its routing on the host (npuport.trace.routing answers it): copied layers give the same audit."""
    pytest.importorskip("transformers")
    from npuport.api import audit_model
    from npuport.model.hf.zoo import causal_lm_types, cut_layers, default_config, tiny

    if "jetmoe" not in causal_lm_types():
        pytest.skip("this transformers has no jetmoe")
    cut = tmp_path / "jetmoe.json"
    cut.write_text(json.dumps(tiny(cut_layers(default_config("jetmoe"), 4)), default=str))
    scenarios = ["train:batch=1,seq=16", "prefill:batch=1,seq=16", "decode:batch=1,past=16"]
    a = audit_model(hf_config=str(cut), scenarios=scenarios)
    b = audit_model(hf_config=str(cut), scenarios=scenarios, reuse=False)
    assert all(t.reused > 0 for t in a[0].traces.values())
    assert any("expert routing" in n for n in a[1]["notes"])
    assert a[1] == b[1]


def test_cli_no_reuse_gives_the_same_report(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from npuport.cli.main import cli

    cfg = _cut(CONFIGS[[c.stem for c in CONFIGS].index("tinyllama-1.1b")], tmp_path)
    outs = []
    for extra in ([], ["--no-reuse"]):
        out = tmp_path / f"r{len(outs)}.json"
        res = CliRunner().invoke(cli, ["audit", "--hf", str(cfg), "--scenario", "prefill:seq=64", "--format", "json",
                                       "-o", str(out), "--quiet", *extra])
        assert res.exit_code == 0, res.output
        data = json.loads(out.read_text())
        data.pop("timings", None)
        outs.append(data)
    assert outs[0] == outs[1]
