"""Every shipped behaviour rule fires on a minimal model that triggers it and stays silent on a close neighbour.

Each case traces two tiny models on fake tensors (or one model on two chips / with and without a
reproducibility run) and evaluates all rules on both. Rules about torch_npu custom ops trace CPU stand-ins
registered with the real op schemas (tests/rules/npu_standins.py); collective rules trace torch's functional
collectives, which record without a process group under fake tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.attention.flex_attention  # noqa: F401 - the module flex_attention below comes from
import torch.nn.functional as F

from npuport.rules import evaluate, load_rules
from tests.rules.conftest import ids, trace_of

r = torch.randn
B910A, B910B, P310 = "Ascend910A", "Ascend910B", "Ascend310P"


@dataclass
class Case:
    rule: str
    pos: Callable[..., Any]
    neg: Callable[..., Any] | None  # None: the same model, judged with neg_chip / neg_repro
    inputs: Callable[[], tuple]
    neg_inputs: Callable[[], tuple] | None = None
    chip: str = B910B
    neg_chip: str | None = None
    repro: bool = False
    neg_repro: bool | None = None
    train: bool = False
    module: bool = False  # pos/neg are nn.Module factories
    eval_mode: bool = False
    name: str = ""


class SdpaAttention(nn.Module):
    """The neighbour of nn.MultiheadAttention: the same projections around F.scaled_dot_product_attention."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, q, k, v):  # noqa: ANN001
        a, b, c = (t.view(2, 4, 2, 4).transpose(1, 2) for t in self.qkv(q).chunk(3, -1))
        return self.out(F.scaled_dot_product_attention(a, b, c).transpose(1, 2).reshape(2, 4, 8))


def fa(q, k=None, v=None, heads=2, layout="BNSD", **kw):  # noqa: ANN001, ANN003
    return torch.ops.npu.npu_fusion_attention(q, q if k is None else k, q if v is None else v, heads, layout, **kw)[0]


def ar(x, op="sum"):  # noqa: ANN001
    return torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(x, op, "0"))


def bnsd(d=64, n=2, s=4, dtype=torch.float32):  # noqa: ANN001
    return lambda: (r(1, n, s, d, dtype=dtype),)


x8 = lambda: (r(8),)  # noqa: E731
x2d = lambda: (r(4, 8),)  # noqa: E731
img = lambda: (r(1, 2, 8, 8),)  # noqa: E731
ints = lambda: (torch.randint(0, 8, (8,)),)  # noqa: E731
sdpa = F.scaled_dot_product_attention
flex_attention = torch.nn.attention.flex_attention.flex_attention
npu = torch.ops.npu


def sdpa_with_flag(q: torch.Tensor) -> torch.Tensor:  # NPB062 needs a backend flag in the calls' source (NPS022)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return sdpa(q, q, q)


CASES = [
    # A. dtypes
    Case("NPB001", lambda x: x.double(), lambda x: x.float() * 1, x8),
    Case("NPB002", lambda x: x * 2, lambda x: x * 2, lambda: (r(8, dtype=torch.float64),), neg_inputs=x8),
    Case("NPB003", lambda x: torch.sort(x)[0], lambda x: torch.sort(x)[0], lambda: (r(8, dtype=torch.float64),), neg_inputs=x8),
    Case("NPB004", lambda x: torch.cumsum(x, 0), lambda x: torch.cumsum(x, 0), lambda: (r(8, dtype=torch.float64),), neg_inputs=x8),
    Case("NPB005", lambda i: torch.argsort(i), lambda i: torch.argsort(i.float()), ints),
    Case("NPB006", lambda i: torch.eq(i, i), lambda i: torch.eq(i.float(), i.float()), ints),
    Case("NPB007", lambda x: F.max_pool2d(x, 2, return_indices=True)[1], lambda x: F.max_pool2d(x, 2), img),
    Case("NPB008", lambda i, w: F.embedding_bag(i.view(2, 4), w), lambda i, w: F.embedding(i.view(2, 4), w).mean(1),
         lambda: (torch.randint(0, 8, (8,)), r(8, 4))),
    Case("NPB009", lambda x: x.bfloat16() * 2, None, x8, chip=B910A, neg_chip=B910B, name="910A"),
    Case("NPB009", lambda x: x.bfloat16() * 2, None, x8, chip=P310, neg_chip=B910B, name="310P"),
    Case("NPB010", lambda a, b: torch.polar(a, b).real, lambda a, b: a * torch.cos(b), lambda: (r(8).abs(), r(8))),
    Case("NPB011", lambda x: torch.fft.rfft(x).abs(), lambda x: x.abs(), x8),
    Case("NPB012", lambda x: x.to(torch.float8_e4m3fn), lambda x: x.to(torch.float16), x8),
    # B. internal precision
    Case("NPB013", lambda x, w: F.linear(x, w), None, lambda: (r(4, 8), r(8, 8)), chip=B910A, neg_chip=B910B),
    Case("NPB013", lambda x, w: F.linear(x, w), lambda x, w: F.linear(x, w), lambda: (r(4, 8), r(8, 8)),
         neg_inputs=lambda: (r(4, 8, dtype=torch.float16), r(8, 8, dtype=torch.float16)), chip=B910A, name="fp16"),
    Case("NPB014", lambda x, w: F.conv2d(x, w), None, lambda: (r(1, 2, 8, 8), r(4, 2, 3, 3)), chip=B910B, neg_chip=B910A),
    Case("NPB015", lambda a: a @ a, None, lambda: (r(8, 8),), repro=True, neg_repro=False),
    Case("NPB016", lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"), x8),
    Case("NPB016", lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"), lambda: (r(8, requires_grad=True),), train=True, name="backward"),
    Case("NPB017", lambda x: F.gelu(x), None, x8, repro=True, neg_repro=False),
    Case("NPB018", lambda x: torch.isnan(x).any(), None, x8, chip=B910A, neg_chip=B910B),
    Case("NPB019", lambda x: x.half() * 2, None, x8, chip=B910A, neg_chip=B910B),
    Case("NPB020", lambda x: torch.sign(x), lambda x: torch.abs(x), x8),
    # C. determinism
    Case("NPB021", lambda a: a @ a, lambda a: torch.relu(a), lambda: (r(8, 8),), repro=True),
    Case("NPB021", lambda a: a @ a, None, lambda: (r(8, 8),), repro=True, neg_repro=False, name="off"),
    Case("NPB022", lambda x: torch.empty(8) + x, lambda x: torch.empty(8).fill_(1.0) + x, x8, repro=True),
    Case("NPB023", lambda x: ar(x), lambda x: torch.ops._c10d_functional.wait_tensor(
        torch.ops._c10d_functional.all_gather_into_tensor(x, 2, "0")), x8, repro=True),
    Case("NPB024", lambda x, g: npu.npu_add_rms_norm(x, x, g)[0], None, lambda: (r(2, 8), r(8)), repro=True, neg_repro=False),
    # D. RNG
    Case("NPB025", lambda x: F.dropout(x, 0.1, training=True), lambda x: F.dropout(x, 0.1, training=False), x8),
    Case("NPB025", lambda x: torch.native_dropout(x, 0.1, True)[0], lambda x: torch.native_dropout(x, 0.0, True)[0], x8, name="native"),
    Case("NPB026", lambda x: torch.rand_like(x) + x, lambda x: torch.zeros_like(x) + x, x8),
    Case("NPB027", lambda x: (lambda o, m: o * m)(*torch.native_dropout(x, 0.1, True)),
         lambda x: torch.native_dropout(x, 0.1, True)[0], x8),
    Case("NPB028", lambda q: fa(q, keep_prob=0.9, scale=0.125), lambda q: fa(q, keep_prob=1.0, scale=0.125), bnsd()),
    Case("NPB029", lambda q: sdpa(q, q, q, dropout_p=0.1), lambda q: sdpa(q, q, q, dropout_p=0.0), bnsd()),
    Case("NPB026", lambda x: torch.rand_like(x) + x, lambda q: sdpa(q, q, q, dropout_p=0.1), x8, neg_inputs=bnsd(), name="not-sdpa-dropout"),
    # E. formats, views, compilation
    Case("NPB030", lambda x, w: F.linear(x, w), None, lambda: (r(4, 8), r(8, 8)), chip=B910A, neg_chip=B910B),
    Case("NPB031", lambda x: x[:, 0].add_(1), lambda x: x.add_(1), x2d, chip=B910A),
    Case("NPB032", lambda x, w: F.conv2d(x, w), lambda x, w: F.conv3d(x, w), lambda: (r(1, 2, 8, 8), r(4, 2, 3, 3)),
         neg_inputs=lambda: (r(1, 2, 4, 8, 8), r(4, 2, 3, 3, 3)), chip=B910A),
    Case("NPB033", lambda x: x.to(memory_format=torch.channels_last) * 1, lambda x: x.contiguous() * 1, img),
    Case("NPB033", lambda x: x.contiguous(memory_format=torch.channels_last) * 1, lambda x: x.contiguous() * 1, img, name="contiguous"),
    # F. fallbacks
    Case("NPB042", lambda x: torch.sinc(x), lambda x: torch.sin(x), x8),
    Case("NPB043", lambda x: torch.logit(x), None, lambda: (r(8).sigmoid(),), chip=B910A, neg_chip=B910B),
    Case("NPB044", lambda x, m: torch._masked_softmax(x, m, 2, 0), lambda x, m: torch._masked_softmax(x, m, 3, 2),
         lambda: (r(2, 3, 4), torch.zeros(2, 3, 4, dtype=torch.bool)),
         neg_inputs=lambda: (r(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, dtype=torch.bool))),
    Case("NPB045", lambda: nn.MultiheadAttention(8, 2, batch_first=True), lambda: SdpaAttention(),
         lambda: (r(2, 4, 8), r(2, 4, 8), r(2, 4, 8)), module=True, eval_mode=True),
    Case("NPB046", lambda x: torch.trunc(x), lambda x: torch.floor(x), x8),
    Case("NPB047", lambda x, i: x.index_put_((i,), torch.ones(())), lambda x, i: x.index_put_((i,), torch.ones(())),
         lambda: (r(40000), torch.randint(0, 40000, (30000,))), neg_inputs=lambda: (r(40000), torch.randint(0, 40000, (100,)))),
    Case("NPB048", lambda x: torch.nonzero_static(x, size=4), lambda x: (x > 0).float(), x8),
    # documented deviations
    Case("NPB050", lambda x: x.sum(dtype=torch.float32), lambda x: x.sum(), x8),
    Case("NPB051", lambda x: x.topk(2, sorted=False)[0], lambda x: x.topk(2)[0], x8),
    Case("NPB053", lambda x: x.repeat_interleave(2), lambda x: x.repeat_interleave(2), lambda: (r(3_000_000),), neg_inputs=lambda: (r(1000),)),
    Case("NPB054", lambda x: torch.histc(x), lambda x: x.clamp(0, 1), x8),
    Case("NPB055", lambda a: torch.matmul(a, a), lambda a: torch.matmul(a, a), lambda: (r(1, 1, 1, 1, 1, 2, 3, 3),),
         neg_inputs=lambda: (r(1, 1, 1, 2, 3, 3),)),
    Case("NPB056", lambda lp, t: F.nll_loss(lp, t), lambda lp, t: F.mse_loss(lp[:, 0], t.float()),
         lambda: (r(4, 5).log_softmax(-1), torch.randint(0, 5, (4,)))),
    Case("NPB057", lambda x: F.interpolate(x, scale_factor=2.0), lambda x: F.interpolate(x, size=(16, 16)), img),
    Case("NPB058", lambda x: F.max_pool2d(x, 2, dilation=2), lambda x: F.max_pool2d(x, 2), img),
    # G. attention
    Case("NPB060", lambda q, m: sdpa(q, q, q, attn_mask=m), lambda q, m: sdpa(q, q, q, attn_mask=m > 0),
         lambda: (r(1, 2, 4, 64), r(4, 4))),
    Case("NPB061", lambda q: sdpa(q, q, q), lambda q: sdpa(q, q, q), bnsd(d=576), neg_inputs=bnsd(d=64), name="head-dim"),
    Case("NPB061", lambda q: sdpa(q, q, q), None, bnsd(d=64), chip=B910A, neg_chip=B910B, name="910A"),
    Case("NPB061", lambda q: sdpa(q, q, q), lambda q: sdpa(q, q, q), bnsd(d=62), neg_inputs=bnsd(d=64), name="fp32-d%4"),
    Case("NPB062", sdpa_with_flag, lambda q: torch.softmax(q @ q.transpose(-1, -2), -1) @ q, bnsd()),
    Case("NPB063", lambda q, m: fa(q, atten_mask=m, scale=0.125), lambda q, m: fa(q, scale=0.125),
         lambda: (r(1, 2, 4, 64), torch.zeros(4, 4, dtype=torch.bool))),
    Case("NPB064", lambda q, m: fa(q, atten_mask=m, scale=0.125), lambda q, m: fa(q, atten_mask=m < 0, scale=0.125),
         lambda: (r(1, 2, 4, 64), r(4, 4))),
    Case("NPB065", lambda q: fa(q), lambda q: fa(q, scale=1 / math.sqrt(64)), bnsd()),
    Case("NPB066", lambda q: fa(q, scale=0.1), lambda q: fa(q, scale=0.1), bnsd(d=1024), neg_inputs=bnsd(d=128)),
    Case("NPB066", lambda q, k: fa(q, k, k, heads=3, scale=0.1), lambda q, k: fa(q, k, k, heads=4, scale=0.1),
         lambda: (r(1, 3, 4, 64), r(1, 2, 4, 64)), neg_inputs=lambda: (r(1, 4, 4, 64), r(1, 2, 4, 64)), name="gqa"),
    Case("NPB067", lambda q, k: fa(q, k, k, scale=0.1), lambda q, k: fa(q, k.half(), k.half(), scale=0.1),
         lambda: (r(1, 2, 4, 64, dtype=torch.float16), r(1, 2, 4, 64))),
    Case("NPB068", lambda q, m: fa(q, atten_mask=m, sparse_mode=2, scale=0.1), lambda q, m: fa(q, atten_mask=m, sparse_mode=2, scale=0.1),
         lambda: (r(1, 2, 4, 64), torch.ones(4, 4, dtype=torch.bool)),
         neg_inputs=lambda: (r(1, 2, 4, 64), torch.ones(2048, 2048, dtype=torch.bool))),
    Case("NPB069", lambda q: fa(q, layout="TND", actual_seq_qlen=[0, 2, 4], actual_seq_kvlen=[2, 4, 6], scale=0.1),
         lambda q: fa(q, layout="TND", actual_seq_qlen=[2, 4, 6], actual_seq_kvlen=[2, 4, 6], scale=0.1), lambda: (r(6, 2, 64),)),
    Case("NPB070", lambda q: fa(q, scale=0.1), None, bnsd(), chip=B910A, neg_chip=B910B),
    # H. fused NPU ops
    Case("NPB071", lambda x, g: npu.npu_rms_norm(x, g)[0], lambda x, g: npu.npu_rms_norm(x, g)[0],
         lambda: (r(2, 64, dtype=torch.bfloat16), r(64, dtype=torch.bfloat16)),
         neg_inputs=lambda: (r(2, 64, dtype=torch.float16), r(64, dtype=torch.float16)), chip=B910A),
    Case("NPB071", lambda x, g: npu.npu_rms_norm(x, g)[0], lambda x, g: npu.npu_rms_norm(x, g)[0],
         lambda: (r(2, 4, dtype=torch.float16), r(4, dtype=torch.float16)),
         neg_inputs=lambda: (r(2, 64, dtype=torch.float16), r(64, dtype=torch.float16)), chip=P310, name="310P-tail"),
    Case("NPB072", lambda x, g: npu.npu_add_rms_norm(x, x, g)[0], None, lambda: (r(2, 8), r(8)), chip=B910A, neg_chip=B910B),
    Case("NPB073", lambda x: npu.npu_swiglu(x), lambda x: (lambda a, b: F.silu(a) * b)(*x.chunk(2, -1)), lambda: (r(2, 16),)),
    Case("NPB074", lambda x, c: npu.npu_rotary_mul(x, c, c), lambda x, c: npu.npu_rotary_mul(x, c, c),
         lambda: (r(2, 4, 64), r(1, 4, 64)), neg_inputs=lambda: (r(1, 2, 4, 64), r(1, 1, 4, 64))),
    Case("NPB075", lambda q, c: npu.npu_apply_rotary_pos_emb(q, q, c, c)[0], lambda q, c: npu.npu_apply_rotary_pos_emb(q, q, c, c)[0],
         lambda: (r(1, 4, 2, 96), r(1, 4, 1, 96)), neg_inputs=lambda: (r(1, 4, 2, 128), r(1, 4, 1, 128))),
    Case("NPB076", lambda q: flex_attention(q, q, q), lambda q: sdpa(q, q, q, is_causal=True), bnsd()),
    # I. distributed
    Case("NPB080", lambda x: ar(x, "band"), lambda x: ar(x, "sum"), lambda: (torch.randint(0, 2, (8,)),)),
    Case("NPB080", lambda x: ar(x), lambda x: ar(x), lambda: (r(8, dtype=torch.float64),), neg_inputs=x8, name="fp64"),
    Case("NPB081", lambda x: ar(x.t()), lambda x: ar(x.t().contiguous()), x2d),
]


def _run(case: Case, positive: bool) -> set[str]:
    model = case.pos if positive or case.neg is None else case.neg
    inputs = case.inputs if positive or case.neg_inputs is None else case.neg_inputs
    chip = case.chip if positive or case.neg_chip is None else case.neg_chip
    repro = case.repro if positive or case.neg_repro is None else case.neg_repro
    tr = trace_of(model, inputs, train=case.train, module=case.module, eval_mode=case.eval_mode)
    return ids(tr, chip=chip, reproducibility=repro)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{c.name}" if c.name else c.rule for c in CASES])
def test_rule_fires_and_neighbour_is_silent(case: Case) -> None:
    assert case.rule in _run(case, True), "rule did not fire on its trigger"
    assert case.rule not in _run(case, False), "rule fired on the close neighbour"


def test_every_site_rule_has_a_case() -> None:
    covered = {c.rule for c in CASES} | {"NPB034", "NPB040", "NPB041"}  # tested below with several scenarios / a coverage stub
    missing = {r.id for r in load_rules()} - covered
    assert not missing


def test_mha_training_is_not_the_fast_path() -> None:
    tr = trace_of(lambda: nn.MultiheadAttention(8, 2, batch_first=True), lambda: (r(2, 4, 8, requires_grad=True),) * 3,
                  module=True, train=True)
    assert "NPB045" not in ids(tr)


def test_dropout_is_not_reported_as_plain_rng() -> None:
    tr = trace_of(lambda x: F.dropout(x, 0.1, training=True), x8)
    got = ids(tr)
    assert "NPB025" in got and "NPB026" not in got


def _linear_traces(shapes: dict[str, tuple[int, ...]]) -> dict:
    return {name: trace_of(lambda: nn.Linear(8, 8), lambda s=s: (r(*s),), module=True, scenario=name) for name, s in shapes.items()}


def test_shapes_varying_across_scenarios_recompile_on_910a() -> None:
    varying = _linear_traces({"prefill": (1, 16, 8), "decode": (1, 1, 8)})
    steady = _linear_traces({"prefill": (1, 16, 8), "again": (1, 16, 8)})
    assert "NPB034" in ids(varying, chip=B910A)
    assert "NPB034" not in ids(varying, chip=B910B)
    assert "NPB034" not in ids(steady, chip=B910A)
    finding = next(f for f in evaluate(varying, chip=B910A) if f.id == "NPB034")
    assert "decode" in finding.evidence[0].detail and "prefill" in finding.evidence[0].detail


class _Resolution:
    def __init__(self, status: str) -> None:
        self.status = status


def test_coverage_rules_use_the_coverage_data(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    table = {"aten::sinc": "cpu-fallback", "aten::erfinv": "unsupported", "aten::scaled_dot_product_attention": "native"}
    stub = types.ModuleType("npuport.coverage")
    stub.resolve = lambda op, version: _Resolution(table.get(op, "native"))  # type: ignore[attr-defined]
    stub.default_version = lambda: "2.14.0"  # type: ignore[attr-defined]
    from npuport.rules import predicates

    monkeypatch.setattr(predicates, "coverage", stub)
    got = ids(trace_of(lambda x: torch.sinc(x) + torch.erfinv(x), x8))
    assert {"NPB040", "NPB041"} <= got
    assert not {"NPB040", "NPB041"} & ids(trace_of(lambda x: torch.sin(x) + torch.erf(x), x8))
    table["aten::_scaled_dot_product_flash_attention_for_cpu"] = "cpu-fallback"
    assert "NPB040" not in ids(trace_of(lambda q: sdpa(q, q, q), bnsd())), "children of a native composite never run on NPU"


def test_coverage_rules_with_the_shipped_coverage_data() -> None:
    coverage = pytest.importorskip("npuport.coverage")
    if coverage.resolve("aten::_linalg_eigh").status != "cpu-fallback":
        pytest.skip("coverage data no longer lists _linalg_eigh as a CPU fallback")
    square = lambda: (r(4, 4),)  # noqa: E731
    f = next(f for f in evaluate({"s": trace_of(lambda x: torch.linalg.eigh(x)[0], square)}) if f.id == "NPB040")
    assert f.evidence[0].op == "aten::_linalg_eigh" and "cpu-fallback" in f.evidence[0].detail
    assert "NPB040" not in ids(trace_of(lambda x: x @ x.T, square))
    assert "NPB040" not in ids(trace_of(lambda q: sdpa(q, q, q), bnsd())), "SDPA is native: its CPU child never runs"


def test_coverage_rules_are_silent_without_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "npuport.coverage", None)  # import fails
    assert not {"NPB040", "NPB041"} & ids(trace_of(lambda x: torch.sinc(x), x8))


def test_evidence_points_at_the_line_and_counts_calls() -> None:
    def model(x):  # noqa: ANN001
        for _ in range(3):
            x = F.gelu(x)
        return x

    f = next(f for f in evaluate({"s": trace_of(model, x8)}) if f.id == "NPB016")
    (ev,) = f.evidence
    assert ev.calls == 3 and ev.source and ev.source.endswith(f":{model.__code__.co_firstlineno + 2}")
    assert ev.time_share is not None and 0 < ev.time_share <= 1
    js = f.to_json()
    assert js["id"] == "NPB016" and js["evidence"][0]["calls"] == 3 and js["level"] == "warning"


def test_time_share_callback_is_used() -> None:
    f = next(f for f in evaluate({"s": trace_of(lambda x: F.gelu(x), x8)}, time_share=lambda c: 0.25) if f.id == "NPB016")
    assert f.evidence[0].time_share == pytest.approx(0.25)


def test_chip_changes_the_level() -> None:
    tr = {"s": trace_of(lambda x, w: F.linear(x, w), lambda: (r(4, 8), r(8, 8)))}
    levels = {chip: {f.id: f.level for f in evaluate(tr, chip=chip)}.get("NPB013") for chip in (B910A, P310, B910B)}
    assert levels == {B910A: "error", P310: "warning", B910B: None}


def test_cuda_chip_is_a_user_error() -> None:
    from npuport.errors import NpuportError

    with pytest.raises(NpuportError, match="Ascend NPU"):
        evaluate({}, chip="H100-SXM")


def test_torch_npu_version_range() -> None:
    from dataclasses import replace

    rule = next(r for r in load_rules() if r.id == "NPB016")
    from npuport.rules.catalog import parse_range

    ranged = replace(rule, torch_npu=parse_range(">=2.1,<2.6"))
    tr = {"s": trace_of(lambda x: F.gelu(x), x8)}
    assert [f.id for f in evaluate(tr, rules=[ranged], torch_npu="2.5.1")] == ["NPB016"]
    assert evaluate(tr, rules=[ranged], torch_npu="2.6.0") == []


def test_finding_totals_count_evidence_beyond_the_cap():
    """`calls` and `time_share` of a finding are totals over every matching place, not the first MAX_EVIDENCE."""
    from npuport.rules.catalog import load_rules
    from npuport.rules.engine import MAX_EVIDENCE, _finding

    rule = load_rules()[0]
    n = MAX_EVIDENCE + 15
    groups = {("train", "aten::mm", f"m.{i}", f"f.py:{i}", ""): [2, 0.01, "Linear"] for i in range(n)}
    f = _finding(rule, "Ascend910B", groups)
    assert len(f.evidence) == MAX_EVIDENCE and f.evidence_omitted == 15
    assert f.calls == 2 * n and f.to_json()["calls"] == 2 * n
    assert abs(f.time_share - 0.01 * n) < 1e-12


def test_kept_evidence_names_every_op_however_many_places_one_fills() -> None:
    """40 places of a backward op sort before the forward's: the 25 kept still include the forward (an unsupported
    op's action takes the rule's fix from the evidence's ops)."""
    from npuport.rules.engine import MAX_EVIDENCE, Evidence, _kept

    ev = [Evidence("train", "higher_order::flex_attention_backward", f"layers.{i}", "Attention", "a.py:1", 1, 0.5, "")
          for i in range(40)] + [Evidence("train", "higher_order::flex_attention", "layers.0", "Attention", "a.py:1", 1, 0.1, "")]
    kept = _kept(ev)
    assert len(kept) == MAX_EVIDENCE and {e.op for e in kept} == {e.op for e in ev}
    assert kept[:MAX_EVIDENCE - 1] == ev[:MAX_EVIDENCE - 1]  # the order is kept: the largest places first
    assert _kept(ev[:3]) == ev[:3]
