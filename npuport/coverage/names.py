"""Operator names as npuport writes them: 'aten::add.Tensor', the default overload bare ('aten::mm'), 'npu::npu_rms_norm'."""

from __future__ import annotations

import re

from npuport.errors import NpuportError

_OP = re.compile(r"^(?P<ns>[A-Za-z_][A-Za-z0-9_]*)::(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<overload>[A-Za-z0-9_]+))?$")


def normalize_op(op: str) -> str:
    """'aten::mm.default' -> 'aten::mm'; raises NpuportError for anything that is not 'namespace::name[.overload]'."""
    text = op.strip() if isinstance(op, str) else op
    match = _OP.match(text) if isinstance(text, str) else None
    if match is None:
        raise NpuportError(
            "not an operator overload name",
            "'namespace::name[.overload]', e.g. aten::mm, aten::add.Tensor, npu::npu_rms_norm",
            repr(op),
        )
    overload = match["overload"]
    base = f"{match['ns']}::{match['name']}"
    return base if overload in (None, "default") else f"{base}.{overload}"


def schema_name(func: str) -> str:
    """The overload name of a native_functions-style 'func:' string: 'add.Tensor(Tensor self, ...) -> Tensor' -> 'add.Tensor'."""
    name = func.split("(", 1)[0].strip()
    return name[: -len(".default")] if name.endswith(".default") else name


def namespace(op: str) -> str:
    return op.split("::", 1)[0]
