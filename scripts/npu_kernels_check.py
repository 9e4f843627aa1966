#!/usr/bin/env python3
"""npuport's Ascend 910B estimate held against the kernels of a real NPU run's kernel_details.csv.

Issue 22: the NPU's numbers are unverified because no NPU is lent here; a real run's kernel table published by
someone else is the nearest thing.

Reads the Ascend PyTorch profiler's `kernel_details.csv` (ASCEND_PROFILER_OUTPUT/ of a real run; the file is not in
this repository: give its path) and, for each kernel whose work an aten op of npuport's cost model describes, sets its
measured duration beside what npuport estimates for that op with the same shapes and dtypes on the chip the file ran
on, through the same functions the audit costs ops with (npuport.cost.op_costs.call_cost / frame_cost /
backward_frame_cost, npuport.cost.timing.call_device_s with mappings/timing.yaml's `npu` family entry). The fused
NPU kernels the audit proposes (RmsNorm, SwiGlu, RotaryPositionEmbedding) are held against the fused-kernel time the
fusion advice reports (npuport.fusion.advice: the chip's roofline over the fused kernel's inputs and outputs).

The chip: no kernel_details.csv names its SoC. The file says how many AI cores a cube kernel used (Block Dim), how
many vector cores a vector kernel used, and the clock (aic_total_cycles / (Block Dim x aicore_time)). The Ascend910B
entry of mappings/hardware.yaml (910B1: 24 AI cores, 48 vector cores, 1850 MHz) derives its peaks and bandwidth from
those counts and that clock; the same derivation is applied to the file's counts and clock (--ai-cores,
--vector-cores, --clock-mhz override them). The bandwidth is the 910B1's 32 bytes per cycle per AI core (as derived
there, flagged `derive: ddr_rate`), so for another SKU it is an assumption too.

Usage: python scripts/npu_kernels_check.py KERNEL_DETAILS.csv [--label TEXT]
       [--ai-cores N] [--vector-cores N] [--clock-mhz F] [--top 30]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport.cost.op_costs import backward_frame_cost, call_cost, frame_cost  # noqa: E402
from npuport.cost.roofline import ChipProfile, load_chips  # noqa: E402
from npuport.cost.timing import call_device_s, op_class, op_variant, timing_for  # noqa: E402
from npuport.trace.records import ApiFrame, OpCall, TensorMeta, TensorRef  # noqa: E402

_DTYPES = {"DT_BF16": "bfloat16", "BF16": "bfloat16", "FLOAT16": "float16", "DT_FLOAT16": "float16",
           "FLOAT": "float32", "DT_FLOAT": "float32", "INT64": "int64", "INT32": "int32", "BOOL": "bool",
           "UINT8": "uint8"}
# torch_npu's npu_fusion_attention: sparse_mode 2, 3 and 4 take a compressed 2048 x 2048 mask and skip the masked
# blocks (causal and band); a 2048 x 2048 mask on a longer sequence is that compressed mask
# (Ascend/op-plugin docs/context/torch_npu-npu_fusion_attention.md, "atten_mask" and "sparse_mode")
_COMPRESSED_MASK = (2048, 2048)


@dataclasses.dataclass(frozen=True)
class Kernel:
    type: str
    core: str
    block: int
    inputs: tuple[tuple[int, ...] | None, ...]
    in_dtypes: tuple[str, ...]
    outputs: tuple[tuple[int, ...] | None, ...]
    out_dtypes: tuple[str, ...]
    duration_s: float
    clock_hz: float | None


def _shapes(text: str) -> tuple[tuple[int, ...] | None, ...]:
    text = text.strip().strip('"')
    if not text or text == "N/A":
        return ()
    out: list[tuple[int, ...] | None] = []
    for part in text.split(";"):
        part = part.strip()
        out.append(tuple(int(x) for x in part.split(",")) if part else None)
    return tuple(out)


def _dtypes(text: str) -> tuple[str, ...]:
    return tuple(_DTYPES.get(d.strip(), d.strip().lower()) for d in text.strip().strip('"').split(";"))


def read_kernels(path: Path) -> list[Kernel]:
    out: list[Kernel] = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
            block_text = row.get("Block Dim") or row.get("Block Num") or "0"
            # collectives (HCCL rows, hcom_* tasks) and AI CPU tasks are not compute kernels of the step
            if (row.get("Accelerator Core") in ("HCCL", "AI_CPU", "COMMUNICATION") or row["Type"].startswith("hcom")
                    or not block_text.isdigit()):
                continue
            block = int(block_text)
            clock = None
            try:
                cycles, busy = float(row.get("aic_total_cycles") or 0), float(row.get("aicore_time(us)") or 0)
                if cycles and busy and block:
                    clock = cycles / (block * busy * 1e-6)
            except ValueError:
                pass
            duration = float(row["Duration(us)"])
            if not math.isfinite(duration) or duration < 0:
                raise ValueError(f"a kernel's Duration(us) is {row['Duration(us)']!r}, not a time")
            if duration == 0:  # a task the profiler timed at nothing: no time to hold an estimate against
                continue
            out.append(Kernel(row["Type"], row.get("Accelerator Core", ""), block, _shapes(row.get("Input Shapes", "")),
                              _dtypes(row.get("Input Data Types", "")), _shapes(row.get("Output Shapes", "")),
                              _dtypes(row.get("Output Data Types", "")), duration * 1e-6, clock))
    return out


def chip_of(kernels: list[Kernel], ai_cores: int | None, vector_cores: int | None, clock_mhz: float | None) -> tuple[ChipProfile, str]:
    """The Ascend910B entry re-derived for the file's AI cores, vector cores and clock."""
    base = load_chips()["Ascend910B"]
    p = base.platform
    cube = [k for k in kernels if k.core == "AI_CORE"]
    # the Block Dim most cube kernels ran with (small ones launch fewer blocks); the A2 series pairs two vector cores
    # with each AI core (A2A3.ini: 24 and 48), so the vector cores follow unless given
    big = [k.block for k in cube if k.block >= 8]
    aic = ai_cores or (statistics.mode(big) if big else int(p["ai_core_cnt"]))
    aiv = vector_cores or 2 * aic
    clocks = [k.clock_hz for k in cube if k.clock_hz]
    hz = clock_mhz * 1e6 if clock_mhz else (statistics.median(clocks) if clocks else float(p["cube_freq_mhz"]) * 1e6)
    f0 = float(p["cube_freq_mhz"]) * 1e6
    cube_scale = aic * hz / (int(p["ai_core_cnt"]) * f0)
    vec_scale = aiv * hz / (int(p["vector_core_cnt"]) * f0)
    chip = dataclasses.replace(base, matrix_peak={d: v * cube_scale for d, v in base.matrix_peak.items()},
                               vector_peak=base.vector_peak * vec_scale, memory_bandwidth=base.memory_bandwidth * cube_scale)
    said = (f"Ascend910B entry re-derived for {aic} AI cores, {aiv} vector cores at {hz / 1e6:.0f} MHz: "
            f"bf16 cube peak {chip.matrix_peak['bfloat16'] / 1e12:.1f} TFLOP/s, "
            f"bandwidth {chip.memory_bandwidth / 1e12:.2f} TB/s (derived), vector {chip.vector_peak / 1e12:.1f} TFLOP/s")
    return chip, said


def _meta(i: int, shape: tuple[int, ...], dtype: str) -> TensorMeta:
    return TensorMeta(i, tuple(shape), dtype)


def _call(op: str, ins: list[tuple[tuple[int, ...], str]], outs: list[tuple[tuple[int, ...], str]],
          kwargs: dict[str, Any] | None = None, phase: str = "forward") -> OpCall:
    inputs = tuple(_meta(i, s, d) for i, (s, d) in enumerate(ins))
    outputs = tuple(_meta(100 + i, s, d) for i, (s, d) in enumerate(outs))
    return OpCall(0, op, "compute", phase, inputs, outputs, tuple(TensorRef(i) for i in range(len(ins))), kwargs or {},  # type: ignore[arg-type]
                  "", "", None, None)


def _device_s(chip: ChipProfile, call: OpCall) -> tuple[float, str]:
    model = timing_for(chip)
    cost = call_cost(call)
    base = call.op.split("::")[1].split(".")[0]
    cls = op_class(base, call.kind)
    cls = op_variant(base, cls, tuple(len(t.shape) for t in call.inputs), None, model, backward=call.phase == "backward")
    return call_device_s(model, chip, cls, cost.flops, cost.bytes, cost.dtype, cost.matrix), f"{call.op} ({cls})"


def _matmul(k: Kernel, chip: ChipProfile) -> tuple[float, str] | None:
    ins = [s for s in k.inputs if s]
    out = k.outputs[0] if k.outputs else None
    if len(ins) < 2 or out is None:
        return None
    a, b = ins[0], ins[1]
    if len(a) == 2 and len(b) == 2 and len(out) == 2:
        m, n = out
        kk = a[0] * a[1] // m
        return _device_s(chip, _call("aten::mm", [((m, kk), k.in_dtypes[0]), ((kk, n), k.in_dtypes[1])], [((m, n), k.out_dtypes[0])]))
    if len(a) == 3 and len(b) == 3 and len(out) == 3:
        g, m, n = out
        kk = a[0] * a[1] * a[2] // (g * m)
        return _device_s(chip, _call("aten::bmm", [((g, m, kk), k.in_dtypes[0]), ((g, kk, n), k.in_dtypes[1])], [((g, m, n), k.out_dtypes[0])]))
    return None


def _empty(k: Kernel) -> bool:
    return any(s is not None and 0 in s for s in (*k.inputs, *k.outputs))


def _attention(k: Kernel, chip: ChipProfile, backward: bool) -> tuple[float, str] | None:
    """FlashAttentionScore(Grad): q, k, v in any layout; batch, query heads and sequence from softmax_max's shape
    (B, N, S, 8), the head dim from q's size; causal when the mask is the compressed 2048 x 2048 one."""
    ins = k.inputs
    if len(ins) < 3 or not all(ins[:3]):
        return None
    stats = next((s for s in (k.outputs if not backward else ins) if s and len(s) == 4 and s[-1] == 8), None)
    if stats is None:
        return None
    b, n, s = stats[0], stats[1], stats[2]
    q, kv = ins[0], ins[1]
    assert q is not None and kv is not None
    numel = 1
    for x in q:
        numel *= x
    d = numel // (b * n * s)
    nk_numel = 1
    for x in kv:
        nk_numel *= x
    nk = nk_numel // (b * s * d)
    dt = k.in_dtypes[0]
    causal = any(m == _COMPRESSED_MASK for m in ins[3:] if m)
    frame = ApiFrame(0, "aten::scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention",
                     (_meta(0, (b, n, s, d), dt), _meta(1, (b, nk, s, d), dt), _meta(2, (b, nk, s, d), dt)),
                     (_meta(3, (b, n, s, d), dt),), (TensorRef(0), TensorRef(1), TensorRef(2)),
                     {"is_causal": causal, "enable_gqa": nk != n}, "", "", None)
    cost = backward_frame_cost(frame, ()) if backward else frame_cost(frame, ())
    model = timing_for(chip)
    cls = op_variant("scaled_dot_product_attention", "attention", (4, 4, 4), None, model, backward=backward)
    t = call_device_s(model, chip, cls, cost.flops, cost.bytes, cost.dtype, True)
    return t, f"aten::scaled_dot_product_attention{' backward' if backward else ''} ({cls}{', causal' if causal else ''})"


def _same(op: str, n_in: int) -> Callable[[Kernel, ChipProfile], tuple[float, str] | None]:
    """A kernel that computes what one aten op does, on its first `n_in` inputs and its first output."""
    def est(k: Kernel, chip: ChipProfile) -> tuple[float, str] | None:
        ins = [(s, d) for s, d in zip(k.inputs, k.in_dtypes) if s][:n_in]
        if len(ins) < n_in or not k.outputs or not k.outputs[0]:
            return None
        return _device_s(chip, _call(op, ins, [(k.outputs[0], k.out_dtypes[0])]))
    return est


def _fused(k: Kernel, chip: ChipProfile) -> tuple[float, str] | None:
    """The fusion advice's time for a fused kernel: the roofline over its inputs and outputs (npuport.fusion.advice
    `_saving`: FLOPs of the chain it replaces, bytes of the fused kernel's own inputs and outputs)."""
    size = {"bfloat16": 2, "float16": 2, "float32": 4}
    moved = 0
    for shapes, dts in ((k.inputs, k.in_dtypes), (k.outputs, k.out_dtypes)):
        for s, d in zip(shapes, dts):
            if s:
                n = 1
                for x in s:
                    n *= x
                moved += n * size.get(d, 4)
    t, _ = chip.roofline(0.0, moved, k.in_dtypes[0], False)
    return t, f"fused {k.type} (fusion advice: roofline of its inputs and outputs)"


# kernel Type -> how npuport estimates that work; the CANN operator each Type names (CANN operator list, Ascend
# docs "Operator List": MatMul / MatMulV2 / MatMulV3 = 2-D GEMM, BatchMatMul(V2) = batched GEMM, FlashAttentionScore
# (Grad) = npu_fusion_attention, Add, Mul, FastGelu = gelu's tanh form, LayerNormV3 = layer_norm, ScaledMaskedSoftmax
# = softmax of a masked, scaled input, SoftmaxV2 = softmax, Cast, RmsNorm / SwiGlu / RotaryPositionEmbedding = the
# fused kernels of torch_npu's npu_rms_norm / npu_swiglu / npu_rotary_mul)
ESTIMATORS: dict[str, Callable[[Kernel, ChipProfile], tuple[float, str] | None]] = {
    "MatMul": _matmul, "MatMulV2": _matmul, "MatMulV3": _matmul, "BatchMatMul": _matmul, "BatchMatMulV2": _matmul,
    "FlashAttentionScore": lambda k, c: _attention(k, c, False),
    "FlashAttentionScoreGrad": lambda k, c: _attention(k, c, True),
    "Add": _same("aten::add.Tensor", 2), "Mul": _same("aten::mul.Tensor", 2),
    "FastGelu": _same("aten::gelu", 1), "LayerNormV3": _same("aten::native_layer_norm", 1),
    "ScaledMaskedSoftmax": _same("aten::_softmax", 1), "SoftmaxV2": _same("aten::_softmax", 1),
    "Cast": _same("aten::_to_copy", 1),
    "RmsNorm": _fused, "SwiGlu": _fused, "RotaryPositionEmbedding": _fused,
}


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, received {text!r}") from None
        if not value > 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a positive number, received {text!r}")
        return value
    return parse


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 (all) or a positive number of rows, received {text!r}")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="ASCEND_PROFILER_OUTPUT/kernel_details.csv of a real NPU run")
    ap.add_argument("--label", default="", help="what the run is, for the first line")
    ap.add_argument("--ai-cores", type=_positive(int), help="AI cores of the chip (default: the Block Dim most cube kernels ran with)")
    ap.add_argument("--vector-cores", type=_positive(int), help="vector cores (default: twice the AI cores, as on the A2 series)")
    ap.add_argument("--clock-mhz", type=_positive(float), help="clock (default: aic_total_cycles / (Block Dim x aicore_time), median)")
    ap.add_argument("--top", type=_count, default=30, help="rows of the per-kernel table (0: all)")
    a = ap.parse_args()
    try:
        kernels = read_kernels(a.csv)
    except (OSError, UnicodeDecodeError, KeyError, ValueError) as exc:
        sys.exit(f"npu_kernels_check: cannot read {a.csv} as a kernel_details.csv ({type(exc).__name__}: {exc})")
    if not kernels:
        sys.exit(f"npu_kernels_check: {a.csv} holds no compute kernels (expected the Ascend profiler's kernel_details.csv)")
    chip, said = chip_of(kernels, a.ai_cores, a.vector_cores, a.clock_mhz)
    total = sum(k.duration_s for k in kernels)
    groups: dict[tuple[Any, ...], list[Kernel]] = defaultdict(list)
    for k in kernels:
        groups[(k.type, k.inputs, k.in_dtypes)].append(k)
    rows = []
    for (typ, ins, dts), ks in groups.items():
        fn = ESTIMATORS.get(typ)
        got = fn(ks[0], chip) if fn and not _empty(ks[0]) else None  # a zero-size shape: nothing to estimate
        if got is None:
            continue
        est, how = got
        meas = statistics.mean(k.duration_s for k in ks)
        shapes = ";".join(",".join(map(str, s)) if s else "" for s in ins).rstrip(";")
        rows.append((meas * len(ks), typ, shapes, dts[0] if dts else "", len(ks), meas, est, how))
    rows.sort(reverse=True)
    covered = sum(r[0] for r in rows)
    if not rows:
        sys.exit(f"npu_kernels_check: none of the {len(kernels)} kernels of {a.csv} has an estimator here "
                 f"(kernel types known: {', '.join(sorted(ESTIMATORS))})")
    by_type: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        by_type[r[1]][0] += r[0]
        by_type[r[1]][1] += r[6] * r[4]
    print(f"{a.label or a.csv}: {len(kernels)} compute kernels (collectives left out), {total * 1e3:.1f} ms; {said}")
    estimated = sum(r[6] * r[4] for r in rows)
    print(f"compared: {covered * 1e3:.1f} ms of kernel time ({covered / total:.0%}) in {sum(r[4] for r in rows)} kernels; "
          f"npuport's estimate for them {estimated * 1e3:.1f} ms ({estimated / covered:.2f}x)")
    print()
    print("| kernel | input shapes | dtype | calls | measured mean | npuport estimate | estimate / measured | estimated as |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for _, typ, shapes, dt, n, meas, est, how in rows[: a.top or len(rows)]:
        print(f"| {typ} | {shapes} | {dt} | {n} | {meas * 1e6:.1f} us | {est * 1e6:.1f} us | {est / meas:.2f} | {how} |")
    print()
    print("| kernel type | measured (all compared calls) | npuport estimate | estimate / measured |")
    print("|---|---:|---:|---:|")
    for typ, (m, e) in sorted(by_type.items(), key=lambda kv: -kv[1][0]):
        print(f"| {typ} | {m * 1e3:.2f} ms | {e * 1e3:.2f} ms | {e / m:.2f} |")


if __name__ == "__main__":
    main()
