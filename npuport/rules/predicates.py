"""Named conditions that need code: registered with `@predicate`, referenced by name from behaviours.yaml.

A site predicate is `fn(site, ctx, **params) -> str | None`: a short detail saying why it fired (it becomes
the evidence's `detail`), or None. A trace predicate (`over_traces=True`) is `fn(traces, ctx, **params)` and
yields `(scenario, site, detail)` for conditions that only show across scenarios. Registering a name twice
fails at import, like torch's register_flop_formula.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from npuport import coverage
from npuport.errors import NpuportError
from npuport.mappings import load_checked
from npuport.rules.sites import Context, Site, base_name
from npuport.scan.cuda_refs import Finder
from npuport.scan.source_scan import parse_file
from npuport.trace.records import TensorMeta, Trace

_ITEMSIZE = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1}
_FLOATS = {"float16", "bfloat16", "float32", "float64"}


@dataclass(frozen=True)
class PredicateSpec:
    name: str
    func: Callable[..., Any]
    over_traces: bool = False
    # local: the answer depends only on what a copied layer's call shares with its template's (op, arguments, shapes,
    # dtypes, API, frame op, module type, phase) and on the chip / release, never on tensor ids, module paths or the
    # calls around it; the engine then decides it once per template call (npuport.trace.reuse)
    local: bool = False


REGISTRY: dict[str, PredicateSpec] = {}


@dataclass(frozen=True)
class OpTables:
    """The op tables the predicates read, by base name (mappings/op_classes.yaml `predicate_ops`)."""

    allocators: frozenset[str]  # torch.empty* : allocate without initialising
    collective_namespaces: frozenset[str]
    collective_reductions: frozenset[str]
    seeded_npu_ops: frozenset[str]
    fusion_attention_ops: frozenset[str]


@functools.lru_cache(maxsize=1)
def op_tables() -> OpTables:
    raw = load_checked("op_classes.yaml")["predicate_ops"]
    return OpTables(**{key: frozenset(raw[key]["ops"]) for key in OpTables.__dataclass_fields__})


def predicate(name: str, *, over_traces: bool = False, local: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in REGISTRY:
            raise RuntimeError(f"behaviour predicate {name!r} is registered twice ({REGISTRY[name].func.__qualname__} and {fn.__qualname__})")
        REGISTRY[name] = PredicateSpec(name, fn, over_traces, local)
        return fn

    return register


def _shape(t: TensorMeta | None) -> str:
    return "x".join(map(str, t.shape)) if t is not None and t.shape else "scalar"


# ---------------------------------------------------------------- dtypes, dataflow
@predicate("complex_dtype", local=True)
def complex_dtype(site: Site, ctx: Context) -> str | None:
    if site.name in ("complex", "polar"):
        return f"torch.{site.name}"
    for t in site.tensors():
        if t.dtype.startswith("complex"):
            return f"{t.dtype} tensor {_shape(t)}"
    return None


@predicate("uninitialized_read")
def uninitialized_read(site: Site, ctx: Context) -> str | None:
    """The first op to touch a torch.empty* result reads it instead of writing it."""
    call = site.call
    allocators = op_tables().allocators
    if call is None or call.phase != "forward" or site.name in allocators:
        return None
    for i, t in enumerate(site.inputs):
        if i in call.mutated:
            continue
        producer = ctx.producer(t.id)
        if producer is None or base_name(producer.op) not in allocators:
            continue
        first = next((c for c in ctx.consumers(t.id) if c.index > producer.index), None)
        if first is call:
            return f"reads {base_name(producer.op)} output {_shape(t)} from line {producer.source or '?'} before it is written"
    return None


def _is_collective(site: Site) -> bool:
    return site.op.split("::", 1)[0] in op_tables().collective_namespaces and site.name not in ("wait_tensor", "barrier", "broadcast_")


@predicate("collective")
def collective(site: Site, ctx: Context, reductions_only: bool = False, non_contiguous: bool = False) -> str | None:
    if not _is_collective(site) or (reductions_only and site.name not in op_tables().collective_reductions):
        return None
    if non_contiguous:
        bad = next((t for t in site.inputs if t.stride is not None), None)
        return f"non-contiguous input {_shape(bad)} stride {bad.stride}" if bad is not None else None
    return f"{site.name} on {site.first_input.dtype if site.first_input else '?'}"


@predicate("hccl_unsupported")
def hccl_unsupported(site: Site, ctx: Context) -> str | None:
    if not _is_collective(site) or site.name not in op_tables().collective_reductions:
        return None
    ops = [a for a in site.args if isinstance(a, str) and a.lower() in ("band", "bor", "bxor")]
    if ops:
        return f"ReduceOp {ops[0].upper()} raises on HCCL"
    dt = site.first_input.dtype if site.first_input else ""
    if dt in ("float64", "uint64"):
        return f"{dt} reduction (HCCL supports it only on the 950)"
    return None


# ---------------------------------------------------------------- RNG
_DROPOUT_APIS = ("torch.nn.functional.*dropout*", "torch.dropout", "torch.feature_dropout", "torch.alpha_dropout",
                 "torch.feature_alpha_dropout", "Tensor.dropout*")


def _dropout_api(api: str | None) -> bool:
    return api is not None and any(fnmatch.fnmatchcase(api, p) for p in _DROPOUT_APIS)


@predicate("dropout_active", local=True)
def dropout_active(site: Site, ctx: Context) -> str | None:
    if site.phase != "forward":
        return None
    if site.frame is not None:
        if site.name in ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"):
            p, train = site.arg("p", 0.0), site.arg("train", True)
            return f"p={p}" if p and train else None
        return None
    call = site.call
    if call is not None and call.frame is not None and base_name(ctx.trace.frames[call.frame].op).endswith("dropout"):
        return None  # the frame reports it
    if site.name == "native_dropout":
        p, train = site.positional(1, 0.0), site.positional(2, True)
        return f"p={p}" if p and train else None
    if site.name in ("bernoulli_", "bernoulli") and _dropout_api(site.api):
        keep = site.positional(1)
        return f"p={round(1 - keep, 6)}" if isinstance(keep, float) else "dropout in training mode"
    return None


@predicate("dropout_mask_read")
def dropout_mask_read(site: Site, ctx: Context) -> str | None:
    if site.name != "native_dropout" or site.call is None or len(site.outputs) < 2:
        return None
    mask = site.outputs[1]
    for c in ctx.consumers(mask.id):
        if c.index > site.call.index and c.phase == "forward" and base_name(c.op) != "native_dropout_backward":
            return f"mask {_shape(mask)} read by {c.op} at {c.source or '?'}"
    return None


@predicate("npu_seeded_op", local=True)
def npu_seeded_op(site: Site, ctx: Context) -> str | None:
    if not site.op.startswith("npu::"):
        return None
    tables = op_tables()
    if site.name in tables.fusion_attention_ops:
        keep = site.arg("keep_prob", 1.0)
        return f"keep_prob={keep}" if isinstance(keep, (int, float)) and keep < 1 else None
    return site.name if site.name in tables.seeded_npu_ops else None


# ---------------------------------------------------------------- formats, shapes, compilation
@predicate("inplace_on_view")
def inplace_on_view(site: Site, ctx: Context) -> str | None:
    call = site.call
    if call is None or not call.mutated:
        return None
    for i in call.mutated:
        t = call.inputs[i]
        if t.base is not None:
            return f"writes view {_shape(t)} of tensor #{t.base}"
    return None


@predicate("conv_1d_2d", local=True)
def conv_1d_2d(site: Site, ctx: Context) -> str | None:
    if site.name not in ("convolution", "_convolution") or site.first_input is None:
        return None
    rank = len(site.first_input.shape)
    return f"{rank - 2}-D convolution" if rank in (3, 4) else None


def _signature(c: Any) -> tuple:
    return tuple(t.shape for t in c.inputs)


@predicate("shape_varies_across_scenarios", over_traces=True)
def shape_varies_across_scenarios(traces: Mapping[str, Trace], ctx: Context) -> Iterator[tuple[str, Site, str]]:
    seen: dict[tuple, dict[str, tuple[Any, set]]] = {}
    for scenario, trace in traces.items():
        for c in trace.calls:
            if c.kind != "compute" or c.phase != "forward" or not c.inputs:
                continue
            key = (c.op, c.source, c.module)
            per = seen.setdefault(key, {})
            first, shapes = per.setdefault(scenario, (c, set()))
            shapes.add(_signature(c))
    for key, per in seen.items():
        if len(per) < 2:
            continue
        variants = {s for _, shapes in per.values() for s in shapes}
        if len({frozenset(shapes) for _, shapes in per.values()}) > 1 and len(variants) > 1:
            names = sorted(per)
            detail = ", ".join(f"{n}: {' / '.join('x'.join(map(str, s[0])) for s in sorted(per[n][1]))}" for n in names)
            scenario = names[0]
            yield scenario, Site.of_call(per[scenario][0]), f"{len(variants)} input shapes ({detail})"


# ---------------------------------------------------------------- fallbacks
def _coverage() -> tuple[Callable[..., Any], Callable[[], str]] | None:
    resolve = getattr(coverage, "resolve", None)
    default_version = getattr(coverage, "default_version", None)
    if resolve is None or default_version is None:
        return None
    return resolve, default_version


def _status(ctx: Context, op: str, funcs: tuple[Callable[..., Any], Callable[[], str]]) -> str | None:
    resolve, default_version = funcs
    version = ctx.torch_npu or ctx.cache.setdefault("coverage-version", default_version())
    key = ("coverage", op, version)
    if key not in ctx.cache:
        ctx.cache[key] = getattr(resolve(op, version), "status", None)
    return ctx.cache[key]


@predicate("coverage_status", local=True)
def coverage_status(site: Site, ctx: Context, status: list) -> str | None:
    """The coverage data says this aten op is `status` on the target torch_npu (silent when coverage is absent)."""
    funcs = _coverage()
    call = site.call
    if funcs is None or call is None or call.kind != "compute" or not site.op.startswith("aten::"):
        return None
    if call.frame is not None:
        frame = ctx.trace.frames.get(call.frame)
        if frame is not None and _status(ctx, frame.op, funcs) in ("native", "npu-custom"):
            return None  # the composite runs as one NPU kernel: its CPU decomposition never dispatches there
    got = _status(ctx, site.op, funcs)
    if got in status:
        version = ctx.torch_npu or ctx.cache.get("coverage-version")
        return f"{got} on torch_npu {version}"
    return None


@predicate("masked_softmax_fallback", local=True)
def masked_softmax_fallback(site: Site, ctx: Context) -> str | None:
    if site.name != "_masked_softmax" or site.first_input is None:
        return None
    rank = len(site.first_input.shape)
    dim, mask_type = site.arg("dim"), site.arg("mask_type")
    reasons = []
    if rank != 4:
        reasons.append(f"{rank}-D input")
    if dim is not None and dim not in (-1, rank - 1):
        reasons.append(f"dim={dim}")
    if mask_type != 2:
        reasons.append(f"mask_type={mask_type}")
    return ", ".join(reasons) or None


_MHA_TYPES = {"MultiheadAttention", "TransformerEncoderLayer"}


@predicate("mha_fast_path")
def mha_fast_path(site: Site, ctx: Context) -> str | None:
    if site.call is None or site.module_type not in _MHA_TYPES or not ctx.is_inference:
        return None
    seen = ctx.cache.setdefault("mha-modules", set())
    if site.module in seen:
        return None
    seen.add(site.module)
    return f"nn.{site.module_type} at inference"


@predicate("index_put_aicpu", local=True)
def index_put_aicpu(site: Site, ctx: Context) -> str | None:
    if site.name not in ("index_put", "index_put_", "_index_put_impl_") or site.first_input is None:
        return None
    indices = site.arg("indices") or []
    tensors = [t for t in indices if isinstance(t, TensorMeta)]
    reasons = []
    count = max((t.numel for t in tensors), default=0)
    if count > 20000:
        reasons.append(f"{count} indices (> 20000)")
    if site.first_input.dtype == "float64":
        reasons.append("float64 data")
    present = [i for i, t in enumerate(indices) if isinstance(t, TensorMeta)]
    if present and present[-1] - present[0] + 1 != len(present):
        reasons.append("indexed dims are not consecutive")
    if len({t.shape for t in tensors if t.dtype != "bool"}) > 1:
        reasons.append("indices need broadcasting")
    return ", ".join(reasons) or None


# ---------------------------------------------------------------- documented deviations
@predicate("repeat_interleave_large", local=True)
def repeat_interleave_large(site: Site, ctx: Context) -> str | None:
    if site.name != "repeat_interleave" or not site.outputs:
        return None
    n = site.outputs[0].numel
    return f"output has {n} elements (limit 2^22 = 4194304)" if n >= 1 << 22 else None


@predicate("upsample_scale_factor", local=True)
def upsample_scale_factor(site: Site, ctx: Context) -> str | None:
    if not site.name.startswith(("upsample_", "_upsample_")):
        return None
    for name in ("scale_factors", "scales", "scales_h", "scales_w", "scales_d"):
        value = site.arg(name)
        if value is not None:
            return f"{name}={value}"
    return None


@predicate("pool_dilation", local=True)
def pool_dilation(site: Site, ctx: Context) -> str | None:
    if not site.name.startswith(("max_pool1d", "max_pool2d", "max_pool3d")):
        return None
    dilation = site.arg("dilation")
    values = dilation if isinstance(dilation, (list, tuple)) else [dilation]
    return f"dilation={list(values)}" if any(v not in (None, 1) for v in values) else None


# ---------------------------------------------------------------- SDPA
def _sdpa_tensors(site: Site) -> tuple[TensorMeta | None, TensorMeta | None, TensorMeta | None, Any]:
    return site.arg("query"), site.arg("key"), site.arg("value"), site.arg("attn_mask")


@predicate("sdpa_float_mask", local=True)
def sdpa_float_mask(site: Site, ctx: Context) -> str | None:
    if site.name != "scaled_dot_product_attention":
        return None
    mask = site.arg("attn_mask")
    if isinstance(mask, TensorMeta) and mask.dtype in _FLOATS:
        return f"{mask.dtype} mask {_shape(mask)}"
    return None


def sdpa_path(site: Site, ctx: Context) -> tuple[str, list[str]]:
    """Which NPU SDPA implementation this call reaches ('fused', 'infer', 'math') and why not the fused one.

    Follows ScaledDotProductAttentionKernelNpuOpApi.cpp as summarised in facts/npu-behaviours.md #39.
    """
    q, k, v, mask = _sdpa_tensors(site)
    if not isinstance(q, TensorMeta) or not isinstance(k, TensorMeta):
        return "math", ["unrecognised arguments"]
    reasons = []
    if ctx.chip in ("Ascend910A", "Ascend310P"):
        reasons.append(f"{ctx.chip} is older than Ascend910B1")
    if q.dtype not in ("float16", "bfloat16", "float32"):
        reasons.append(f"{q.dtype} inputs")
    if len(q.shape) != 4:
        reasons.append(f"{len(q.shape)}-D inputs (needs 4-D BNSD)")
    if isinstance(mask, TensorMeta) and mask.dtype != "bool":
        reasons.append(f"{mask.dtype} mask")
    if len(q.shape) == 4 and len(k.shape) == 4:
        nq, d, nkv = q.shape[1], q.shape[-1], k.shape[1]
        if nq > 2048:
            reasons.append(f"{nq} heads (> 2048)")
        if d > 512:
            reasons.append(f"head dim {d} (> 512)")
        if q.dtype == "float32" and d % 4:
            reasons.append(f"fp32 with head dim {d} not a multiple of 4")
        if nkv and nq % nkv:
            reasons.append(f"{nq} query heads not a multiple of {nkv} KV heads")
    if not reasons:
        return "fused", []
    grad = site.frame is not None and ctx.frame_needs_grad(site.frame.id)
    if ctx.chip != "Ascend910A" and not grad and q.dtype in ("float16", "bfloat16") and q.shape and q.shape[-1] % 16 == 0:
        return "infer", reasons
    return "math", reasons


@predicate("sdpa_math_path")
def sdpa_math_path(site: Site, ctx: Context) -> str | None:
    if site.name != "scaled_dot_product_attention":
        return None
    path, reasons = sdpa_path(site, ctx)
    reasons = [r for r in reasons if not r.endswith(" mask") or r.startswith("bool")]  # float masks: NPB060
    if path != "math" or not reasons:
        return None
    return "math path: " + ", ".join(reasons)


# ---------------------------------------------------------------- npu_fusion_attention
@predicate("tensor_arg_dtype_not_in", local=True)
def tensor_arg_dtype_not_in(site: Site, ctx: Context, arg: str, dtypes: list) -> str | None:
    t = site.arg(arg)
    if isinstance(t, TensorMeta) and t.dtype not in dtypes:
        return f"{arg} is {t.dtype}"
    return None


def fa_dims(site: Site) -> tuple[int, int, int, int, int] | None:
    """(Nq, Nkv, Dq, Dk, Dv) of an npu_fusion_attention call from its layout, or None when it is unknown."""
    q, k, v = site.arg("query"), site.arg("key"), site.arg("value")
    layout, heads = site.arg("input_layout"), site.arg("head_num")
    if not all(isinstance(t, TensorMeta) for t in (q, k, v)) or not isinstance(heads, int) or heads <= 0:
        return None
    if layout in ("BSH", "SBH") and len(q.shape) == 3:
        dq = q.shape[2] // heads
        dk = dq
        nkv = k.shape[2] // dk if dk else 0
        dv = v.shape[2] // nkv if nkv else 0
        return heads, nkv, dq, dk, dv
    axes = {"BSND": (2, 3), "BNSD": (1, 3), "TND": (1, 2)}.get(layout)
    if axes is None or len(q.shape) != len(layout):
        return None
    n, d = axes
    return q.shape[n], k.shape[n], q.shape[d], k.shape[d], v.shape[d]


@predicate("fa_shape", local=True)
def fa_shape(site: Site, ctx: Context) -> str | None:
    layout = site.arg("input_layout")
    if layout not in ("BSH", "SBH", "BSND", "BNSD", "TND"):
        return f"layout {layout!r}"
    dims = fa_dims(site)
    if dims is None:
        return f"shapes do not fit layout {layout}"
    nq, nkv, dq, dk, dv = dims
    reasons = []
    if dq != dk:
        reasons.append(f"Dq={dq} != Dk={dk}")
    if dk < dv:
        reasons.append(f"Dk={dk} < Dv={dv}")
    if not 1 <= dq <= 768:
        reasons.append(f"head dim {dq} outside 1..768")
    if not nkv or nq % nkv:
        reasons.append(f"Nq={nq} not a multiple of Nkv={nkv}")
    if nq > 256:
        reasons.append(f"Nq={nq} > 256")
    return ", ".join(reasons) or None


@predicate("fa_dtype", local=True)
def fa_dtype(site: Site, ctx: Context) -> str | None:
    ts = [site.arg(n) for n in ("query", "key", "value", "pse")]
    dts = [t.dtype for t in ts if isinstance(t, TensorMeta)]
    if len(set(dts)) > 1:
        return "q/k/v/pse dtypes " + "/".join(dts)
    if dts and dts[0] not in ("float16", "bfloat16", "float32"):
        return f"{dts[0]} inputs"
    return None


@predicate("fa_sparse_mask", local=True)
def fa_sparse_mask(site: Site, ctx: Context) -> str | None:
    mode = site.arg("sparse_mode", 0)
    need = {2: (2048, 2048), 3: (2048, 2048), 4: (2048, 2048), 7: (2048, 2048), 8: (2048, 2048), 6: (3072, 2048)}.get(mode)
    if need is None:
        return None
    mask = site.arg("atten_mask")
    if not isinstance(mask, TensorMeta):
        return f"sparse_mode={mode} without the compressed {need[0]}x{need[1]} mask"
    if tuple(mask.shape[-2:]) != need:
        return f"sparse_mode={mode} with a {_shape(mask)} mask (needs {need[0]}x{need[1]})"
    return None


@predicate("fa_tnd_leading_zero", local=True)
def fa_tnd_leading_zero(site: Site, ctx: Context) -> str | None:
    if site.arg("input_layout") != "TND":
        return None
    for name in ("actual_seq_qlen", "actual_seq_kvlen"):
        lens = site.arg(name)
        if isinstance(lens, (list, tuple)) and lens and lens[0] == 0:
            return f"{name} starts with 0: {list(lens)[:6]}"
    return None


# ---------------------------------------------------------------- fused NPU ops
@predicate("rms_norm_chip", local=True)
def rms_norm_chip(site: Site, ctx: Context) -> str | None:
    if len(site.inputs) < 2:
        return None
    x, gamma = site.inputs[0], site.inputs[1]
    reasons = []
    if (x.dtype, gamma.dtype) not in (("float16", "float16"), ("float32", "float32")):
        reasons.append(f"x/gamma {x.dtype}/{gamma.dtype} (only fp16/fp16 or fp32/fp32 before 910B)")
    if ctx.chip == "Ascend310P" and x.shape and x.shape[-1] * _ITEMSIZE.get(x.dtype, 4) < 32:
        reasons.append(f"tail dim {x.shape[-1]} is under 32 bytes")
    return ", ".join(reasons) or None


@predicate("add_rms_norm_chip", local=True)
def add_rms_norm_chip(site: Site, ctx: Context) -> str | None:
    if ctx.chip == "Ascend910A":
        return "not in the product table for the Atlas training series"
    if ctx.chip == "Ascend310P" and any(t.dtype == "bfloat16" for t in site.inputs):
        return "bf16 on 310P"
    return None


@predicate("rotary_mul_shape", local=True)
def rotary_mul_shape(site: Site, ctx: Context) -> str | None:
    x = site.first_input
    if x is None:
        return None
    if len(x.shape) != 4:
        return f"{len(x.shape)}-D input (needs 4-D)"
    d = x.shape[-1]
    if d % 2 or d >= 896:
        return f"head dim {d} (needs even and < 896)"
    return None


@predicate("apply_rotary_head_dim", local=True)
def apply_rotary_head_dim(site: Site, ctx: Context) -> str | None:
    x = site.first_input
    if x is None or not x.shape:
        return None
    return f"head dim {x.shape[-1]}" if x.shape[-1] not in (64, 128) else None


# ---------------------------------------------------------------- uses in the source
# A setting made in code leaves no op in a trace (NPB062: sdpa_kernel, torch.backends.cuda.enable_*_sdp): the rule
# holds only where the static scan (npuport.scan, mappings/source_apis.yaml) finds it in a file the traced calls came
# from. Each file is parsed once, never executed; a flag set only in a file that issues no traced op (a training
# script) is left to the static scan's own NPS diagnostic.
def _source_files(traces: Mapping[str, Trace]) -> list[str]:
    """The files the recorded calls and composite frames came from, in the order the traces first name them."""
    lines: dict[str | None, None] = {}  # "file.py:12", each once, in order
    for trace in traces.values():
        lines.update(dict.fromkeys(c.source for c in trace.calls))
        lines.update(dict.fromkeys(f.source for f in trace.frames.values()))
    return list(dict.fromkeys(where.rsplit(":", 1)[0] for where in lines if where))


@functools.lru_cache(maxsize=512)
def _scan_references(path: str, stamp: tuple[int, int]) -> tuple[tuple[str, int, str], ...]:
    """(NPS id, line, what was referenced) of each static-scan reference in one file; () for a file that cannot be
    read or parsed (not the program's text). `stamp` (mtime, size) keys the cache."""
    try:
        text, tree = parse_file(Path(path))
    except NpuportError:
        return ()
    return tuple((r.id, r.line, r.detail) for r in Finder(text, tree).run())


def _uses(traces: Mapping[str, Trace], ids: frozenset[str]) -> str | None:
    found: list[str] = []
    for path in _source_files(traces):
        try:
            st = os.stat(path)
        except OSError:
            continue
        refs = _scan_references(path, (st.st_mtime_ns, st.st_size))
        found += [f"{what} at {os.path.basename(path)}:{line}" for did, line, what in refs if did in ids]
    if not found:
        return None
    return f"uses {found[0]}" + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")


@predicate("source_uses", local=True)  # one answer for the whole program: the same for a copied layer's call
def source_uses(site: Site, ctx: Context, diagnostics: list) -> str | None:
    """The static scan finds one of `diagnostics` (NPS ids) in the files the traced calls came from; the detail
    names the first use."""
    key = ("source_uses", tuple(diagnostics))
    if key not in ctx.cache:
        ctx.cache[key] = _uses(ctx.traces, frozenset(diagnostics))
    return ctx.cache[key]


def all_names() -> Iterable[str]:
    return sorted(REGISTRY)
