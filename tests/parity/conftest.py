"""Tiny models for parity tests: a 2-layer Llama config (hidden 64), a hand-written model file, and a tensor-parallel
MLP recorded under torchrun (gloo, world sizes 2 and 4) for the per-rank tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}

MODEL_PY = '''
import torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.proj = nn.Linear(32, 16)
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        h = F.gelu(self.fc(x))
        return {"y": self.drop(self.proj(h)) + x, "aux": (h.mean(), None)}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(16, 4)
    def forward(self, x):
        for b in self.blocks:
            x = b(x)["y"]
        return self.head(x)

def build_model():
    return Net()

def example_inputs(scenario):
    return {"x": torch.randn(scenario.batch, scenario.seq, 16)}

def loss_fn(output, inputs):
    return output.float().pow(2).mean()
'''


@pytest.fixture(scope="session")
def llama_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cfg") / "tiny-llama.json"
    path.write_text(json.dumps(LLAMA))
    return str(path)


@pytest.fixture(scope="session")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("mdl") / "model.py"
    path.write_text(MODEL_PY)
    return str(path)


@pytest.fixture
def standin_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUPORT_NPU_STANDIN", "1")


def fault(op: str = "aten::mul.Tensor", module: str = "model.layers.1.mlp", scale: float | None = None) -> str:
    return f"cpu-fault:{op}@{module}" + (f"*{scale}" if scale is not None else "")


SCEN = "prefill:batch=1,seq=16"


# Under torchrun: a 2-layer MLP whose linear layers are tensor-parallel (torch.distributed.tensor.parallel: up
# column-wise, down row-wise, both returning DTensors) when a process group of more than one rank exists, and plain
# on one device. PERTURB_RANK=r scales the activation's output on rank r by 1.01: a divergence at a known module.
TP_MODEL = '''
import os
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist

class Act(nn.Module):
    def forward(self, x):
        y = F.gelu(x)
        rank = dist.get_rank() if dist.is_initialized() else 0
        return y * 1.01 if os.environ.get("PERTURB_RANK") == str(rank) else y

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 32)
        self.act = Act()
        self.down = nn.Linear(32, 16)
    def forward(self, x):
        return self.down(self.act(self.up(self.norm(x))))

def build_model():
    net = Net()
    if dist.is_initialized() and dist.get_world_size() > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
        parallelize_module(net, mesh, {"up": ColwiseParallel(use_local_output=False),
                                       "down": RowwiseParallel(use_local_output=False)})
        net.device_mesh = mesh
    return net

def example_inputs(scenario):
    return {"x": torch.randn(scenario.batch, scenario.seq, 16)}
'''

# A program that makes its own process group (as a training script would) and records through the Python API.
OWN_GROUP = '''
import sys
import torch.distributed as dist
from npuport.api import ModelSpec, ParityOptions, parity_record
dist.init_process_group("gloo")
parity_record(ModelSpec(model=sys.argv[1]), sys.argv[2], sys.argv[3], ParityOptions(scenario=sys.argv[4]))
dist.destroy_process_group()
'''

CLI = "import sys\nfrom npuport.cli.main import main\nsys.exit(main())\n"
TP_SCEN = "prefill:batch=1,seq=8"


class Torchrun:
    """Runs `python -m torch.distributed.run --standalone --nproc-per-node N SCRIPT ARGS` in a subprocess."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.model = folder / "model.py"
        self.model.write_text(TP_MODEL)
        (folder / "cli.py").write_text(CLI)
        (folder / "own_group.py").write_text(OWN_GROUP)

    def __call__(self, n: int, script: str, *args: str, env: dict[str, str] | None = None,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NPUPORT_NPU_STANDIN")}
        full_env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", ""), **(env or {}))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
               str(self.folder / script), *args]
        res = subprocess.run(cmd, cwd=self.folder, env=full_env, capture_output=True, text=True, timeout=120)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd[3:])} exited {res.returncode}:\n{res.stdout}\n{res.stderr[-4000:]}")
        return res

    def record(self, n: int, out: str, dev: str = "cpu", env: dict[str, str] | None = None) -> Path:
        self(n, "cli.py", "parity", "record", "--dev", dev, str(self.model), "--scenario", TP_SCEN, "--out-dir", out,
             "--quiet", env=env)
        return self.folder / out


@pytest.fixture(scope="session")
def torchrun(tmp_path_factory: pytest.TempPathFactory) -> Torchrun:
    return Torchrun(tmp_path_factory.mktemp("torchrun"))


@pytest.fixture(scope="session")
def ref2(torchrun: Torchrun) -> Path:
    """World size 2 through the CLI (npuport makes the gloo group from torchrun's variables)."""
    return torchrun.record(2, "ref2")


@pytest.fixture(scope="session")
def dev2(torchrun: Torchrun) -> Path:
    """World size 2 in a group the program made; rank 1's activation perturbed."""
    torchrun(2, "own_group.py", str(torchrun.model), "cpu", "dev2", TP_SCEN, env={"PERTURB_RANK": "1"})
    return torchrun.folder / "dev2"


@pytest.fixture(scope="session")
def single(torchrun: Torchrun) -> Path:
    """The same model on one device, no torchrun."""
    from npuport.api import ModelSpec, ParityOptions, parity_record

    return parity_record(ModelSpec(model=str(torchrun.model)), "cpu", str(torchrun.folder / "single"),
                         ParityOptions(scenario=TP_SCEN))
