"""The Python packers and the C structs in tiling_structs.h cannot drift: same fields, order, types, size."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from npuport.ascendc_kernels.flash_attention.tiling import MAX_VEC_CORES, FaTiling, plan_flash_attention
from npuport.ascendc_kernels.norm_tiling import NormTiling, plan_norm
from npuport.ascendc_kernels.tiling_base import c_layout_has_padding, parse_c_struct
from npuport.cost.roofline import get_chip

PKG = Path(__file__).resolve().parents[2] / "npuport" / "ascendc_kernels"
HEADER = PKG / "tiling_structs.h"
CHIP = get_chip("Ascend910B")


@pytest.mark.parametrize("cls", [NormTiling, FaTiling])
def test_c_struct_matches_python(cls):
    c_fields = parse_c_struct(HEADER, cls.C_STRUCT)
    assert c_fields == list(cls.C_FIELDS)
    assert [n for n, _ in c_fields] == cls.python_fields()
    assert not c_layout_has_padding(c_fields)


def test_fa_array_capacity_matches_the_c_constant():
    assert f"uint32_t[{MAX_VEC_CORES + 1}]" == dict(parse_c_struct(HEADER, "FaTiling"))["unit_start"]


@pytest.mark.parametrize("t", [
    plan_norm("layer_norm", 37, 4099, "bfloat16", CHIP, gamma_dtype="float32", has_beta=True, has_residual=True),
    plan_flash_attention(2, 8, 2, 77, 91, 64, "float16", "BSND", 1, CHIP),
])
def test_pack_round_trips(t):
    blob = t.pack()
    assert len(blob) == struct.calcsize(t.struct_format())
    values = struct.unpack(t.struct_format(), blob)
    flat = []
    for name, ctype in t.C_FIELDS:
        v = getattr(t, name)
        n = int(re.search(r"\[(\d+)\]", ctype).group(1)) if "[" in ctype else 1
        flat += list(v) + [0] * (n - len(v)) if n > 1 else [v]
    assert list(values) == pytest.approx(flat, rel=1e-7)


def test_kernels_include_the_shared_header():
    for src in ("rms_norm", "add_rms_norm", "layer_norm"):
        assert '#include "../norm_common.h"' in (PKG / src / "kernel.asc").read_text()
    assert '#include "tiling_structs.h"' in (PKG / "norm_common.h").read_text()
    assert '#include "../tiling_structs.h"' in (PKG / "flash_attention" / "kernel.asc").read_text()
    assert "struct NormTiling" not in (PKG / "norm_common.h").read_text()  # defined once, in tiling_structs.h


def test_parser_rejects_unparseable_members():
    from npuport.errors import NpuportError
    with pytest.raises(NpuportError):
        parse_c_struct("struct X { uint32_t a, b; };", "X")
    with pytest.raises(NpuportError):
        parse_c_struct("struct Y { uint32_t a; };", "X")
