"""A small GPT-style decoder written by hand: the model the README audits.

npuport's model.py convention: build_model() returns the nn.Module; example_inputs(scenario) returns the forward's
keyword arguments for a scenario (scenario.kind is "train", "prefill" or "decode"; scenario.batch, .seq, .past
give the sizes); loss_fn(output, inputs) turns the output into the training loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_POSITIONS = 1024


@dataclass
class GPTConfig:
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    max_positions: int = MAX_POSITIONS
    dropout: float = 0.1


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=past is None, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x, past=None):
        a, present = self.attn(self.ln_1(x), past)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, idx: torch.Tensor, past: list | None = None):
        b, t = idx.shape
        start = past[0][0].shape[2] if past else 0
        pos = torch.arange(start, start + t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.blocks):
            x, present = block(x, past[i] if past else None)
            presents.append(present)
        return self.lm_head(self.ln_f(x)), presents


def build_model() -> nn.Module:
    return GPT(GPTConfig())


def example_inputs(scenario):
    cfg = GPTConfig()
    idx = torch.randint(0, cfg.vocab_size, (scenario.batch, scenario.seq))
    if scenario.kind == "decode":
        head_dim = cfg.d_model // cfg.n_head
        kv = torch.zeros(scenario.batch, cfg.n_head, scenario.past, head_dim)
        return {"idx": idx, "past": [(kv, kv.clone()) for _ in range(cfg.n_layer)]}
    return {"idx": idx}


def loss_fn(output, inputs):
    logits, _ = output
    idx = inputs[1]["idx"]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())


def parallelize(model: nn.Module, device_type: str) -> nn.Module:
    """How this model is sharded as one rank of a job (`npuport audit model.py --world-size 8`; on the real job,
    device_type is "cuda" or "npu"): the MLPs tensor-parallel over pairs of ranks (fc column-wise, proj row-wise: one
    all-reduce per block forward), then FSDP2 over the rest, one unit per block plus the root."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    world = dist.get_world_size()
    tp = 2 if world % 2 == 0 else 1
    mesh = init_device_mesh(device_type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    if tp > 1:
        for block in model.blocks:
            parallelize_module(block.mlp, mesh["tp"], {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
    if world // tp > 1:
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model
