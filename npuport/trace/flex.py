"""FlexAttention's higher-order operators as the recorder sees them: one attention op per call.

`torch.nn.attention.flex_attention.flex_attention` does not decompose into aten ops: it calls the higher-order
operator `flex_attention` (and autograd calls `flex_attention_backward`), whose score_mod / mask_mod are Python
functions and whose fake-tensor implementation only makes the outputs. The recorder records each call as one op
(`higher_order::flex_attention`, `higher_order::flex_attention_backward`) over its q / k / v (and, backward, out, lse
and the output gradient), with the block mask read down to what the cost model needs: the share of (query block,
key block) tiles the kernel visits.

Why the share is computed here, at record time: the mask is a live BlockMask whose mask_mod is a function; only
metadata reaches the cost model (STYLE 5). On fake tensors the block counts are fake too, so a mask_mod that depends
on nothing but its indices (causal, sliding window, prefix) is evaluated again on small real tensors; one that reads a
tensor of the step (document ids) cannot be, and the call is counted dense (`block_share` None).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

NAMESPACE = "higher_order"
FORWARD, BACKWARD = "flex_attention", "flex_attention_backward"
# mask sizes (batch x heads x queries x keys) up to which a mask_mod is evaluated again on real tensors (one byte each)
_MAX_MASK_ELEMENTS = 1 << 26


def hop_name(func: Any) -> str | None:
    """'higher_order::flex_attention' for FlexAttention's operators; None for any other higher-order operator."""
    name = getattr(func, "_name", None)
    return f"{NAMESPACE}::{name}" if name in (FORWARD, BACKWARD) else None


def normalize(func: Any, args: tuple, out: Any) -> tuple[tuple, dict[str, Any], tuple]:
    """(tensor args, plain kwargs, output tensors) of one FlexAttention call, as it is recorded.

    Forward (q, k, v, score_mod, block_mask, scale, kernel_options, ...): reads q, k, v; writes out and, when q needs a
    gradient, the logsumexp the backward reads. Backward (q, k, v, out, lse, grad_out, grad_lse, fw_graph, joint_graph,
    block_mask, scale, ...): reads q, k, v, out, lse and grad_out; writes dq, dk, dv.
    """
    if func._name == FORWARD:
        q, k, v, score_mod, block_mask, scale = args[:6]
        outs: tuple = (out[0], out[1]) if q.requires_grad else (out[0],)
        tensors: tuple = (q, k, v)
    else:
        q, k, v, o, lse, grad_out = args[:6]
        score_mod, block_mask, scale = args[7], args[9], args[10]
        outs = tuple(t for t in out[:3] if isinstance(t, torch.Tensor))
        tensors = tuple(t for t in (q, k, v, o, lse, grad_out) if isinstance(t, torch.Tensor))
    mask = block_mask[-1]
    kwargs = {
        "scale": float(scale),
        "score_mod": _fn_name(score_mod),
        "mask_mod": _fn_name(mask),
        "block_share": block_share(block_mask),
    }
    return tensors, kwargs, outs


def _fn_name(fn: Any) -> str | None:
    """The user's function name; None for torch's defaults (no score change, no mask)."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return None if name in ("_identity", "noop_mask", "score_mod", "fw_graph") and _is_default(fn) else name


def _is_default(fn: Any) -> bool:
    from torch.nn.attention import flex_attention as fa  # noqa: PLC0415 - loaded with the operator it describes

    if fn is fa._identity or fn is fa.noop_mask:
        return True
    # the autograd path passes score_mod traced into an FX graph; the identity traces to returning its first input
    graph = getattr(fn, "graph", None)
    if graph is None:
        return False
    nodes = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    return not nodes


def block_share(block_mask: tuple) -> float | None:
    """Share of the (query block, key block) tiles the kernel computes: 1.0 without a mask; None when unknown.

    A tile is computed when the mask keeps any of its elements (partial tiles are computed whole and masked inside),
    which is what kv_num_blocks + full_kv_num_blocks count per query block."""
    from torch.nn.attention import flex_attention as fa  # noqa: PLC0415

    mask_mod = block_mask[-1]
    if mask_mod is fa.noop_mask:
        return 1.0
    kv_num, kv_idx, full_num = block_mask[2], block_mask[3], block_mask[4]
    if not _is_fake(kv_num) and not (full_num is not None and _is_fake(full_num)):
        return _share(kv_num, full_num, kv_idx.shape[-1])
    return _evaluate(mask_mod, kv_num.shape[:-1], block_mask[0], block_mask[1], (block_mask[-3], block_mask[-2]))


def _share(kv_num: torch.Tensor, full_num: torch.Tensor | None, kv_blocks: int) -> float:
    visited = int(kv_num.sum()) + (int(full_num.sum()) if full_num is not None else 0)
    total = kv_num.numel() * max(kv_blocks, 1)
    return min(1.0, visited / total) if total else 1.0


def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor  # noqa: PLC0415

    return isinstance(t, FakeTensor) or (isinstance(t, torch.Tensor) and t.device.type == "meta")


def _evaluate(mask_mod: Any, batch_heads: Any, q_len: int, kv_len: int, block: tuple[int, int]) -> float | None:
    """The mask's tile share from mask_mod evaluated on real CPU tensors; None when it cannot be (it reads tensors of
    the fake step, raises, or the mask would be too large to build)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily  # noqa: PLC0415
    from torch.nn.attention.flex_attention import create_block_mask  # noqa: PLC0415

    b, h = (int(batch_heads[0]), int(batch_heads[1])) if len(batch_heads) == 2 else (1, 1)
    if b * h * int(q_len) * int(kv_len) > _MAX_MASK_ELEMENTS:
        return None
    try:
        with unset_fake_temporarily(), torch.no_grad(), _quiet():
            real = create_block_mask(mask_mod, b, h, int(q_len), int(kv_len), device="cpu",
                                     BLOCK_SIZE=(int(block[0]), int(block[1])))
            if _is_fake(real.kv_num_blocks):
                return None
            return _share(real.kv_num_blocks, real.full_kv_num_blocks, real.kv_indices.shape[-1])
    except Exception:  # noqa: BLE001 - any failure of a user's mask_mod on real tensors: the share is unknown
        return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def traceable() -> Iterator[None]:
    """While tracing, FlexAttention runs its operators eagerly on fake tensors, both passes:
    - called outside torch.compile, flex_attention compiles its own call (fullgraph); under the recorder's modes dynamo
      skips that frame and torch raises "found no compiled frames". Its debug switch
      `_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG` calls the operator directly: what the compiled frame would call;
    - `_validate_device` refuses inputs that need a gradient on CPU ("FlexAttention does not support backward on CPU")
      because no CPU backward kernel exists. Fake tensors run no kernel and the operators' fake implementations make
      both passes' outputs, so for fake inputs the check is skipped and the backward of the device the audit models is
      traced; real CPU tensors still get torch's error."""
    import sys  # noqa: PLC0415

    module: Any = sys.modules.get("torch.nn.attention.flex_attention")
    if module is None:  # not loaded by the model: nothing to trace
        yield
        return
    original, debug = module._validate_device, module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG

    def validate(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type == "cpu" and all(_is_fake(t) for t in (query, key, value)):
            return
        original(query, key, value)

    module._validate_device, module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = validate, True
    try:
        yield
    finally:
        module._validate_device, module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = original, debug
