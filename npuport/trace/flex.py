"""FlexAttention's higher-order operators as the recorder sees them: one attention op per call.

`torch.nn.attention.flex_attention.flex_attention` does not decompose into aten ops: it calls the higher-order
operator `flex_attention` (and autograd calls `flex_attention_backward`), whose score_mod / mask_mod are Python
functions and whose fake-tensor implementation only makes the outputs. The recorder records each call as one op
(`higher_order::flex_attention`, `higher_order::flex_attention_backward`) over its q / k / v (and, backward, out, lse
and the output gradient), with the block mask read down to what the cost model needs: the share of (query block,
key block) tiles the kernel visits.

Why the share is computed here, at record time: the mask is a live BlockMask whose mask_mod is a function; only
metadata reaches the cost model (STYLE 5). On fake tensors the block counts are fake too, so a mask_mod that depends
on nothing but its indices (causal, sliding window, prefix) is evaluated again on real CPU tensors, one query tile row
at a time (memory stays bounded at any context length), only over the (batch, head) pairs the mask varies in; one that
reads a tensor of the step (document ids), or one too large to evaluate, cannot be, and the call is counted dense
(`block_share` None) with a note in the trace saying so.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from npuport.trace.records import Trace

NAMESPACE = "higher_order"
FORWARD, BACKWARD = "flex_attention", "flex_attention_backward"
# mask elements (pairs x queries x keys) a mask_mod is evaluated over at most, per mask: about 10 s of CPU
_MAX_EVALUATED = 1 << 31
# mask elements held at once while one tile row is evaluated (one byte each)
_CHUNK_ELEMENTS = 1 << 24
# shares already worked out, per (mask_mod, sizes): a model's layers and both passes share one mask
_SHARES: dict[tuple, "Share"] = {}


@dataclass(frozen=True)
class Share:
    """A mask's share of (query block, key block) tiles; `value` None when unknown, `why` says why (unknown) or how
    it was estimated (from a sample of the (batch, head) pairs)."""

    value: float | None
    why: str | None = None


def hop_name(func: Any) -> str | None:
    """'higher_order::flex_attention' for FlexAttention's operators; None for any other higher-order operator."""
    name = getattr(func, "_name", None)
    return f"{NAMESPACE}::{name}" if name in (FORWARD, BACKWARD) else None


def normalize(func: Any, args: tuple, out: Any, trace: Trace | None = None) -> tuple[tuple, dict[str, Any], tuple]:
    """(tensor args, plain kwargs, output tensors) of one FlexAttention call, as it is recorded.

    Forward (q, k, v, score_mod, block_mask, scale, kernel_options, ...): reads q, k, v; writes out and, when q needs a
    gradient, the logsumexp the backward reads. Backward (q, k, v, out, lse, grad_out, grad_lse, fw_graph, joint_graph,
    block_mask, scale, ...): reads q, k, v, out, lse and grad_out; writes dq, dk, dv. A mask whose tile share is
    unknown (the call counted dense) or estimated from a sample is said once in `trace`'s notes.
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
    share = measure(block_mask)
    kwargs = {
        "scale": float(scale),
        "score_mod": _fn_name(score_mod),
        "mask_mod": _fn_name(mask),
        "block_share": share.value,
    }
    if trace is not None and share.why is not None:
        what = (f"the block mask of {NAMESPACE}::{FORWARD} (mask_mod {kwargs['mask_mod']}, {int(block_mask[0])} "
                f"queries x {int(block_mask[1])} keys)")
        note = (f"{trace.scenario}: {what}: {share.why}; its calls are counted dense (every tile's FLOPs)"
                if share.value is None else f"{trace.scenario}: {what}: tile share {share.value:.4g} {share.why}")
        if note not in trace.notes:
            trace.notes.append(note)
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
    """Share of the (query block, key block) tiles the kernel computes: 1.0 without a mask; None when unknown."""
    return measure(block_mask).value


def measure(block_mask: tuple) -> Share:
    """The block mask's tile share, with why it is unknown or how it was estimated.

    A tile is computed when the mask keeps any of its elements (partial tiles are computed whole and masked inside),
    which is what kv_num_blocks + full_kv_num_blocks count per query block."""
    from torch.nn.attention import flex_attention as fa  # noqa: PLC0415

    mask_mod = block_mask[-1]
    if mask_mod is fa.noop_mask:
        return Share(1.0)
    kv_num, kv_idx, full_num = block_mask[2], block_mask[3], block_mask[4]
    if not _is_fake(kv_num) and not (full_num is not None and _is_fake(full_num)):
        return Share(_share(kv_num, full_num, kv_idx.shape[-1]))
    batch_heads = kv_num.shape[:-1]
    b, h = (int(batch_heads[0]), int(batch_heads[1])) if len(batch_heads) == 2 else (1, 1)
    sizes = (b, h, int(block_mask[0]), int(block_mask[1]), int(block_mask[-3]), int(block_mask[-2]))
    try:
        key: tuple | None = (mask_mod, *sizes)
        hash(key)
    except TypeError:  # a callable object that is not hashable: evaluated every time
        key = None
    if key is not None and key in _SHARES:
        return _SHARES[key]
    found = _evaluate(mask_mod, *sizes)
    if key is not None:
        if len(_SHARES) > 256:
            _SHARES.clear()
        _SHARES[key] = found
    return found


def _share(kv_num: torch.Tensor, full_num: torch.Tensor | None, kv_blocks: int) -> float:
    visited = int(kv_num.sum()) + (int(full_num.sum()) if full_num is not None else 0)
    total = kv_num.numel() * max(kv_blocks, 1)
    return min(1.0, visited / total) if total else 1.0


def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor  # noqa: PLC0415

    return isinstance(t, FakeTensor) or (isinstance(t, torch.Tensor) and t.device.type == "meta")


def _evaluate(mask_mod: Any, b: int, h: int, q_len: int, kv_len: int, q_block: int, kv_block: int) -> Share:
    """The mask's tile share from mask_mod evaluated on real CPU tensors, tile row by tile row.

    The block mask's batch and head sizes are those the mask varies in (create_block_mask with B=None / H=None
    broadcasts one), so each (batch, head) pair it holds is evaluated; when they would take more than _MAX_EVALUATED
    elements an even sample of them is, and the share says so; when one pair would, the share is unknown."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily  # noqa: PLC0415

    per_pair, pairs = q_len * kv_len, b * h
    if per_pair > _MAX_EVALUATED:
        return Share(None, f"its {per_pair:,} mask elements are more than the {_MAX_EVALUATED:,} npuport evaluates")
    n = min(pairs, _MAX_EVALUATED // max(per_pair, 1))
    chosen = range(pairs) if n == pairs else sorted({round(i * (pairs - 1) / max(n - 1, 1)) for i in range(n)})
    n_kv = -(-kv_len // kv_block)
    kept = 0
    try:
        with unset_fake_temporarily(), torch.no_grad(), _quiet():
            for pair in chosen:
                kept += _pair_tiles(mask_mod, pair // h, pair % h, q_len, kv_len, q_block, kv_block)
    except Exception as exc:  # noqa: BLE001 - any failure of a user's mask_mod on real tensors: the share is unknown
        return Share(None, f"it could not be evaluated on real tensors (its mask_mod reads a tensor of the step, or "
                           f"raised {type(exc).__name__})")
    total = len(chosen) * -(-q_len // q_block) * n_kv
    share = min(1.0, kept / total) if total else 1.0
    if len(chosen) < pairs:
        return Share(share, f"estimated from {len(chosen)} of its {pairs} (batch, head) pairs (all of them would be "
                            f"more than the {_MAX_EVALUATED:,} mask elements npuport evaluates)")
    return Share(share)


def _pair_tiles(mask_mod: Any, bi: int, hi: int, q_len: int, kv_len: int, q_block: int, kv_block: int) -> int:
    """Tiles one (batch, head) pair keeps: whole tile rows per evaluation where they fit in _CHUNK_ELEMENTS, else a
    tile row in parts OR-ed together."""
    step = max(1, _CHUNK_ELEMENTS // max(kv_len, 1))
    if step >= q_block:
        step -= step % q_block
        return sum(int(_tiles(mask_mod, bi, hi, q0, min(step, q_len - q0), kv_len, q_block, kv_block).sum())
                   for q0 in range(0, q_len, step))
    kept = 0
    for q0 in range(0, q_len, q_block):
        end = min(q0 + q_block, q_len)
        row = torch.zeros(-(-kv_len // kv_block), dtype=torch.bool)
        for s0 in range(q0, end, step):
            row |= _tiles(mask_mod, bi, hi, s0, min(step, end - s0), kv_len, q_block, kv_block)[0]
        kept += int(row.sum())
    return kept


def _tiles(mask_mod: Any, bi: int, hi: int, q0: int, rows: int, kv_len: int, q_block: int, kv_block: int) -> torch.Tensor:
    """(tile rows, key tiles): whether the mask keeps any element of each tile among queries q0 .. q0 + rows, those
    rows starting a tile row (or lying within one)."""
    from torch.nn.attention.flex_attention import create_mask  # noqa: PLC0415

    def shifted(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return mask_mod(b + bi, h + hi, q + q0, kv)

    mask = create_mask(shifted, 1, 1, rows, kv_len, device="cpu")[0, 0]
    if _is_fake(mask):
        raise TypeError("the mask_mod made a fake tensor")
    n_q, n_kv = -(-rows // q_block), -(-kv_len // kv_block)
    padded = torch.zeros(n_q * q_block, n_kv * kv_block, dtype=torch.bool)
    padded[:rows, :kv_len] = mask
    return padded.view(n_q, q_block, n_kv, kv_block).any(3).any(1)


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
