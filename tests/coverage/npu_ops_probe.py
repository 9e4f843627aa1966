"""Run in a fresh interpreter by test_npu_ops.py: torch.library registrations are process-wide, so the stand-in
is exercised where no other test has defined npu:: ops (and it leaves none behind in the pytest process).
Prints one JSON object of observations."""

from __future__ import annotations

import json
import sys
import types

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npuport import coverage
from npuport.coverage import meta_kernels
from npuport.coverage.npu_ops import defined_ops, fake_torch_npu

MIGRATED = '''
import torch
import torch_npu

class Block(torch.nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.Parameter(torch.ones(dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.up = torch.nn.Linear(dim, 4 * dim)

    def forward(self, x, cos, sin):
        h, _ = torch_npu.npu_rms_norm(x, self.norm, 1e-6)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        b, s, _ = q.shape
        q4, k4 = (t.view(b, s, self.heads, -1) for t in (q, k))
        q4, k4 = torch_npu.npu_apply_rotary_pos_emb(q4, k4, cos, sin, "BSND")
        q4 = torch_npu.npu_rotary_mul(q4, cos, sin)
        attn = torch_npu.npu_fusion_attention(q4.reshape(b, s, -1), k4.reshape(b, s, -1), v, self.heads, "BSH",
                                              scale=0.125)[0]
        y, _, x2 = torch_npu.npu_add_rms_norm(x, attn, self.norm, 1e-6)
        return x2 + torch_npu.npu_swiglu(self.up(y), dim=-1)[..., :x.shape[-1]]
'''


def shape(t) -> list[int] | int:
    return list(t.shape) if isinstance(t, torch.Tensor) else t


def main() -> None:
    seen: dict = {"before": "torch_npu" in sys.modules}
    with fake_torch_npu("2.13.0"):
        module = types.ModuleType("migrated_model")
        exec(compile(MIGRATED, "migrated_model.py", "exec"), module.__dict__)
        model = module.Block().npu()
        with FakeTensorMode(allow_non_fake_inputs=True):
            seen["model_out"] = shape(model(torch.empty(2, 16, 64), torch.empty(1, 16, 1, 16), torch.empty(1, 16, 1, 16)))
        seen["npu_available"] = torch.npu.is_available()
        # libraries probe with find_spec (transformers on every config): it answers instead of raising, and
        # neither transformers nor npuport take the stand-in for an installation
        import importlib.util

        from transformers.utils import is_torch_npu_available

        from npuport.devices.backend import torch_npu_installed, try_import_torch_npu

        seen["find_spec"] = importlib.util.find_spec("torch_npu") is not None
        seen["transformers_npu"] = is_torch_npu_available()
        seen["installed"] = [torch_npu_installed(), try_import_torch_npu() is None]
        import torch_npu

        with fake_torch_npu() as inner:
            seen["reentrant_same"] = inner is torch_npu
        seen["inner_exit_keeps"] = "torch_npu" in sys.modules
        try:
            torch_npu.not_an_op
        except AttributeError as exc:
            seen["missing_attr"] = str(exc)
        with FakeTensorMode():
            x, w = torch.empty(3, 5, 64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16)
            y, rstd = torch_npu.npu_rms_norm(x, w, 1e-6)
            seen["rms"] = [shape(y), str(y.dtype), shape(rstd), str(rstd.dtype)]
            seen["swiglu"] = shape(torch_npu.npu_swiglu(torch.empty(4, 10), dim=0))
            q, k = torch.empty(2, 7, 8 * 16), torch.empty(2, 9, 2 * 16)
            seen["fa_bsh"] = [shape(o) for o in torch_npu.npu_fusion_attention(q, k, k, 8, "BSH")]
            seen["fa_bnsd"] = [shape(o) for o in torch_npu.npu_fusion_attention(
                torch.empty(2, 8, 7, 16), torch.empty(2, 2, 9, 16), torch.empty(2, 2, 9, 32), 8, "BNSD")]
            vals, idx, _ = torch_npu.npu_moe_gating_top_k_softmax(torch.empty(6, 32), None, 2)
            seen["moe"] = [shape(vals), str(idx.dtype)]
            seen["gelu"] = shape(torch.ops.npu.npu_gelu(torch.empty(3)))
    seen["after"] = {"module": "torch_npu" in sys.modules, "torch.npu": hasattr(torch, "npu"),
                     "Tensor.npu": hasattr(torch.Tensor, "npu"), "Module.npu": hasattr(torch.nn.Module, "npu")}
    seen["defined"] = sorted(defined_ops())
    seen["custom_2_13"] = sorted(coverage.load("2.13.0").custom)
    seen["meta_names"] = sorted(meta_kernels.META)
    seen["schema"] = str(torch.ops.npu.npu_rms_norm.default._schema)
    with fake_torch_npu("2.1.0.post10") as old:  # data of another release: existing ops are kept, not redefined
        seen["old_version"] = old.__version__
    real = types.ModuleType("torch_npu")
    sys.modules["torch_npu"] = real
    with fake_torch_npu() as got:
        seen["real_wins"] = got is real
    with fake_torch_npu(prefer_real=False) as got:
        seen["forced_fake"] = bool(getattr(got, "__npuport_fake__", False))
    seen["real_restored"] = sys.modules["torch_npu"] is real
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
