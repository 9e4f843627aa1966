"""Cases from the audit JSON alone (`npuport bench --from audit.json`).

The JSON keeps, per op and scenario, the input shapes (`"2048x2048 2048x5632"`), the call count and the
estimate, and the op's dtypes; it does not keep the non-tensor arguments, per-input dtypes or strides. So the
call is rebuilt by rule for ops whose remaining arguments are implied by the shapes (GEMMs, SDPA, elementwise,
last-dim reductions), every guess is written into the case's notes, and the rest are skipped with a reason.
A `shapes[].example` entry (the recorded call: per-input shape / dtype / stride, arguments with tensor slots)
makes every op exact; it is used whenever the JSON has it.
"""

from __future__ import annotations

import functools
from typing import Any

from npuport.bench.cases import FLOAT_DTYPES, BenchCase, Skipped, TensorSpec, select_ops
from npuport.bench.rebuild import RebuildError, meta_cost
from npuport.cost.op_costs import base_name
from npuport.errors import NpuportError
from npuport.mappings import load_checked
from npuport.trace.records import TensorRef


@functools.lru_cache(maxsize=1)
def _tables() -> dict[str, Any]:
    """The ops rebuilt from shapes alone (mappings/op_classes.yaml `rebuild_from_shapes`): gemm_inputs (base name ->
    tensor inputs), binary / unary (names), scalar_stand_ins (name -> the value standing in for the unrecorded
    scalar), last_dim_reductions (name -> the positional arguments after the tensor)."""
    raw = load_checked("op_classes.yaml")["rebuild_from_shapes"]
    return {key: (frozenset(t["ops"]) if isinstance(t["ops"], list) else dict(t["ops"])) for key, t in raw.items()}


def parse_signature(sig: str) -> list[tuple[int, ...]]:
    """'2048x2048 2048x5632' -> [(2048, 2048), (2048, 5632)]; 'scalar' -> [()]; '-' -> []."""
    if sig.strip() in ("", "-"):
        return []
    out = []
    for part in sig.split():
        out.append(() if part == "scalar" else tuple(int(x) for x in part.split("x")))
    return out


def _dtype(op: dict[str, Any], model_dtype: str, notes: list[str]) -> str:
    floats = [d for d in op.get("dtypes", []) if d in FLOAT_DTYPES]
    if len(floats) == 1:
        return floats[0]
    notes.append(f"dtype assumed {model_dtype} for every input (the op ran with {', '.join(op.get('dtypes', [])) or 'unknown dtypes'})")
    return model_dtype


def _from_example(ex: dict[str, Any]) -> tuple[tuple[TensorSpec, ...], tuple, dict]:
    specs = tuple(TensorSpec(tuple(t["shape"]), t["dtype"], tuple(t["stride"]) if t.get("stride") is not None else None)
                  for t in ex["inputs"])

    def refs(x: Any) -> Any:
        if isinstance(x, dict) and set(x) == {"tensor"}:
            return TensorRef(int(x["tensor"]))
        if isinstance(x, list):
            return [refs(v) for v in x]
        if isinstance(x, dict):
            return {k: refs(v) for k, v in x.items()}
        return x

    return specs, tuple(refs(a) for a in ex.get("args", [])), refs(ex.get("kwargs", {}))


def rule_call(op_name: str, shapes: list[tuple[int, ...]], dtype: str, notes: list[str]) -> tuple[tuple[TensorSpec, ...], tuple, dict]:
    """Inputs and arguments implied by the shapes for the ops the rules know; RebuildError for the rest."""
    name = op_name.split("::", 1)[-1]
    base = base_name(op_name)
    specs = tuple(TensorSpec(s, dtype) for s in shapes)
    refs = tuple(TensorRef(i) for i in range(len(shapes)))
    tables = _tables()
    gemm, scalar, last_dim = tables["gemm_inputs"], tables["scalar_stand_ins"], tables["last_dim_reductions"]
    if base in gemm and len(shapes) == gemm[base]:
        return specs, refs, {}
    if base == "scaled_dot_product_attention" and len(shapes) in (3, 4):
        kwargs: dict[str, Any] = {}
        if len(shapes) == 3:
            kwargs["is_causal"] = True
            notes.append("is_causal=True assumed (no mask in the shapes; the JSON does not record is_causal)")
        else:
            notes.append(f"attention mask assumed additive {dtype} (the JSON does not record the mask's dtype)")
        if shapes[0][-3] != shapes[1][-3]:
            kwargs["enable_gqa"] = True
        return specs, refs, kwargs
    if name in tables["binary"] and len(shapes) == 2:
        return specs, refs, {}
    if name == "embedding" and len(shapes) == 2:
        return (specs[0], TensorSpec(shapes[1], "int64")), refs, {}
    if name in scalar and len(shapes) == 1:
        notes.append(f"scalar argument assumed {scalar[name]!r} (not in the JSON)")
        return specs, (refs[0], scalar[name]), {}
    if name in tables["unary"] and len(shapes) == 1:
        return specs, refs, {}
    if name in last_dim and len(shapes) == 1:
        dim, flag = last_dim[name]
        notes.append(f"reduction over the last dim assumed (dim={dim!r}; not in the JSON)")
        return specs, (refs[0], dim, flag), {}
    raise RebuildError(f"{op_name} needs arguments the audit JSON does not record (add shapes[].example)")


def cases_from_json(data: dict[str, Any], scenario: str | None, top: int | None = None,
                    shapes: int = 3, chip: str | None = None) -> tuple[str, list[BenchCase], list[Skipped]]:
    """(scenario used, cases, skipped) from an npuport.audit/1 object."""
    if data.get("schema") != "npuport.audit/1":
        raise NpuportError("not an npuport audit JSON", 'an object with "schema": "npuport.audit/1"', str(data.get("schema")))
    names = [s["name"] for s in data.get("scenarios", [])]
    if not names:
        raise NpuportError("the audit JSON has no scenarios", "an audit with at least one traced scenario", "none")
    scenario = scenario or names[0]
    if scenario not in names:
        raise NpuportError(f"scenario {scenario!r} is not in the audit JSON", "one of " + ", ".join(names), scenario)
    model_dtype = (data.get("model") or {}).get("dtype") or "float32"
    est_chip = data.get("chip", "")
    ops = [o for o in data.get("ops", []) if o.get("kind") == "compute" and scenario in o.get("scenarios", {})]
    wanted = select_ops(((o["op"], o["scenarios"][scenario]["class"], o["scenarios"][scenario]["estimated_time_s"]) for o in ops), top)
    by_name = {o["op"]: o for o in ops}
    cases: list[BenchCase] = []
    skipped: list[Skipped] = []
    for op_name in wanted:
        op = by_name[op_name]
        for entry in op["scenarios"][scenario]["shapes"][:shapes]:
            sig = entry["inputs"]
            notes: list[str] = []
            try:
                if "example" in entry:
                    specs, args, kwargs = _from_example(entry["example"])
                    origin = "example"
                else:
                    specs, args, kwargs = rule_call(op_name, parse_signature(sig), _dtype(op, model_dtype, notes), notes)
                    origin = "shapes"
                case = BenchCase(op=op_name, signature=sig, inputs=specs, args=args, kwargs=kwargs, calls=int(entry["calls"]),
                                 flops=0.0, bytes=0, matrix=bool(op.get("matrix")), dtype=specs[0].dtype if specs else model_dtype,
                                 estimated_s=float(entry["estimated_time_s"]) / max(1, int(entry["calls"])),
                                 estimate_chip=est_chip, origin=origin, notes=notes, op_class=op["scenarios"][scenario]["class"],
                                 module=(op.get("modules") or [""])[0])
                case.flops, case.bytes, case.matrix, case.dtype = meta_cost(case)
            except RebuildError as exc:
                skipped.append(Skipped(op_name, sig, str(exc)))
                continue
            cases.append(case)
    return scenario, cases, skipped
