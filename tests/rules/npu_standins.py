"""Small CPU stand-ins for torch_npu custom ops, registered under the `npu` namespace with the torch-npu 2.14.0
schemas (as checked in under mappings/coverage/), so rules about npu_* ops can be exercised by tracing a model on a
machine without torch_npu. They compute placeholders: only the recorded names, shapes and arguments matter."""

from __future__ import annotations

import torch

_SCHEMAS = {
    "npu_fusion_attention": "npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
    "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., float keep_prob=1., "
    "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, int[]? prefix=None, "
    "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
    "bool sync=False, str softmax_layout=\"\", Tensor? sink=None, Tensor? dropout_mask=None, int seed=0, int offset=0) "
    "-> (Tensor, Tensor, Tensor, Tensor, int, int, int)",
    "npu_rms_norm": "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
    "npu_add_rms_norm": "npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)",
    "npu_swiglu": "npu_swiglu(Tensor self, int dim=-1) -> Tensor",
    "npu_rotary_mul": "npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', Tensor? rotate=None) -> Tensor",
    "npu_apply_rotary_pos_emb": "npu_apply_rotary_pos_emb(Tensor query, Tensor key, Tensor cos, Tensor sin, str layout='BSND', str rotary_mode='half') -> (Tensor, Tensor)",
}


def _fa(q, k, v, head_num, input_layout, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
    return q.clone(), q.new_empty(1), q.new_empty(1), q.new_empty(0), 0, 0, 0


def _rms(x, gamma, epsilon=1e-6):  # noqa: ANN001
    return x.clone(), x.new_empty(x.shape[:-1] + (1,), dtype=torch.float32)


def _add_rms(x1, x2, gamma, epsilon=1e-6):  # noqa: ANN001
    return x1.clone(), x1.new_empty(x1.shape[:-1] + (1,), dtype=torch.float32), x1.clone()


def _swiglu(x, dim=-1):  # noqa: ANN001
    a, b = x.chunk(2, dim)
    return a.clone()


def _rotary(x, r1, r2, rotary_mode="half", rotate=None):  # noqa: ANN001
    return x.clone()


def _apply_rotary(q, k, cos, sin, layout="BSND", rotary_mode="half"):  # noqa: ANN001
    return q.clone(), k.clone()


_IMPLS = {"npu_fusion_attention": _fa, "npu_rms_norm": _rms, "npu_add_rms_norm": _add_rms, "npu_swiglu": _swiglu,
          "npu_rotary_mul": _rotary, "npu_apply_rotary_pos_emb": _apply_rotary}
_LIB: torch.library.Library | None = None


def ensure() -> None:
    """Register the stand-ins once per process (a real torch_npu is never installed in npuport's tests)."""
    global _LIB
    if _LIB is not None:
        return
    _LIB = torch.library.Library("npu", "FRAGMENT")
    for name, schema in _SCHEMAS.items():
        try:
            torch._C._dispatch_find_schema_or_throw(f"npu::{name}", "")
        except RuntimeError:  # not defined yet (npuport.coverage's stand-in torch_npu may have defined it)
            _LIB.define(schema)
        for key in ("CompositeExplicitAutograd", "Meta"):
            if not torch._C._dispatch_has_kernel_for_dispatch_key(f"npu::{name}", key):
                _LIB.impl(name, _IMPLS[name], key)
