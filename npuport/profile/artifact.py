"""The compact profile artifact (schema npuport.profile/1), a plain JSON dict built from a Kineto trace:

    {"schema": "npuport.profile/1", "source": "trace.json.gz", "device": "cuda" | "cpu",
     "device_time": "kernels" | "cpu self time",   # what device_s measures
     "steps": [{"name": "ProfilerStep#1", "wall_s", "kernel_s", "idle_s"}],
     "ops": [{"op": "aten::mm", "calls", "host_s", "device_s", "share", "parents": {"aten::matmul": s}}],
     "totals": {"ops", "calls", "cpu_ops", "kernels", "host_s", "device_s", "wall_s", "kernel_s", "idle_s"},
     "kernel_classes": {"matmul": {"kernels", "device_s", "top": {name: s}}, ...},
     "kernel_names": {"nvjet_sm90_...": {"kernels", "device_s"}, ...}}

`host_s` is self CPU time, `device_s` the kernels attributed to the op (self CPU time on a CPU run), `share` its
part of all device time, `parents` its device time split by the immediate parent op ("" at the top level), which
lets the join roll ops the audit does not list into the ones it does. `kernel_classes` sums every kernel of the
trace by the kind of work its name says it does (mappings/kernel_classes.yaml; its three costliest names kept): the
only view of a replayed graph's or a compiled step's kernels, which carry no aten op (absent in artifacts written
before 2026-12-05 and in CPU runs). `kernel_names` keeps every distinct kernel name's launches and time, so that a
reader classes them by its own mappings (npuport.profile.kernel_classes.of_artifact). JSON only: nothing is pickled.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from npuport.cost.inventory import module_pattern
from npuport.errors import NpuportError
from npuport.profile.ascend import is_ascend_output, read_ascend
from npuport.profile.kernel_classes import summarize
from npuport.profile.kineto import OpStats, Trace, read_trace
from npuport.profile.nsys import is_nsys_sqlite, read_nsys

SCHEMA = "npuport.profile/1"
_US = 1e-6
_KERNELS_PER_OP = 5  # the kernel names kept per op (by time): what ran, for `profile compare`


def _kernels(st: OpStats) -> dict[str, float]:
    top = sorted(st.kernels.items(), key=lambda kv: -kv[1])[:_KERNELS_PER_OP]
    return {k: t * _US for k, t in top}


def _module_rows(trace: Trace) -> list[dict[str, Any]]:
    """Per (module pattern, op): calls, host and device time; layer indices collapse as in the audit (`layers.*`)."""
    merged: dict[tuple[str, str], list[float]] = {}
    for (module, op), st in trace.by_module.items():
        acc = merged.setdefault((module_pattern(module), op), [0, 0.0, 0.0])
        acc[0] += st.calls
        acc[1] += st.host_us
        acc[2] += st.device_us
    rows: list[dict[str, Any]] = [{"module": m, "op": op, "calls": int(c), "host_s": h * _US, "device_s": d * _US}
                                  for (m, op), (c, h, d) in merged.items()]
    rows.sort(key=lambda r: (-r["device_s"], r["module"], r["op"]))
    return rows


def to_artifact(trace: Trace) -> dict[str, Any]:
    total_dev = sum(s.device_us for s in trace.ops.values())
    rows: list[dict[str, Any]] = [{"op": name, "calls": s.calls, "host_s": s.host_us * _US, "device_s": s.device_us * _US,
             "share": s.device_us / total_dev if total_dev else 0.0,
             "parents": {p: t * _US for p, t in sorted(s.parents.items()) if t}, "kernels": _kernels(s),
             "parent_calls": dict(sorted(s.parent_calls.items())),
             **({"parents_inclusive": {p: t * _US for p, t in sorted(s.parents_inclusive.items()) if t}}
                if s.parents_inclusive else {})}
            for name, s in trace.ops.items()]
    rows.sort(key=lambda r: (-r["device_s"], r["op"]))
    steps = [{"name": s["name"], "wall_s": s["wall_us"] * _US, "kernel_s": s["kernel_us"] * _US,
              "idle_s": s["idle_us"] * _US, "host_s": s.get("host_us", 0.0) * _US} for s in trace.steps]
    return {
        "schema": SCHEMA,
        "source": Path(trace.source).name,
        "device": trace.device,
        "device_time": "kernels" if trace.device != "cpu" else "cpu self time (no kernels in the trace)",
        "format": trace.format,
        "steps": steps,
        "ops": rows,
        "modules": _module_rows(trace),
        "totals": {"ops": len(rows), "calls": sum(r["calls"] for r in rows), "cpu_ops": trace.cpu_ops,
                   "kernels": trace.kernels, "host_s": sum(r["host_s"] for r in rows), "device_s": total_dev * _US,
                   "wall_s": sum(s["wall_s"] for s in steps), "kernel_s": sum(s["kernel_s"] for s in steps),
                   "idle_s": sum(s["idle_s"] for s in steps)},
        **({"kernel_classes": summarize(((k, int(n), t * _US) for k, (n, t) in trace.by_kernel.items()), trace.device),
            # every distinct kernel name: the classes are made again from them by the mappings of the day they are read
            "kernel_names": {k: {"kernels": int(n), "device_s": t * _US}
                             for k, (n, t) in sorted(trace.by_kernel.items(), key=lambda kv: (-kv[1][1], kv[0]))}}
           if trace.by_kernel else {}),
    }


_WHAT_IMPORTS = ("a torch.profiler / Kineto trace (.json, .json.gz), an Ascend profiler output folder or its .db "
                 "export, or an Nsight Systems SQLite export")


def _sniff(p: Path) -> None:
    """Tell apart, by their first bytes, the files a user may hand over that are not a Chrome trace: an SQLite
    database that is no Nsight Systems export, an npuport artifact, anything that is not JSON."""
    with p.open("rb") as fh:
        head = fh.read(4096)
    if head[:16] == b"SQLite format 3\x00":
        raise NpuportError(f"{p} is an SQLite database but no readable Nsight Systems export", "an `nsys export "
                           "--type sqlite` file (tables CUPTI_ACTIVITY_KIND_KERNEL, StringIds) or " + _WHAT_IMPORTS,
                           "other tables, or a database that cannot be opened")
    if head[:2] == b"\x1f\x8b":
        return  # gzip: a .json.gz trace, read as such
    text = head.lstrip()
    if b'"schema": "npuport.profile/' in head or b'"schema":"npuport.profile/' in head:
        raise NpuportError(f"{p} is already a profile artifact", _WHAT_IMPORTS + " (an artifact is read as it is by "
                           "`profile compare` and `audit --profile`)", "schema npuport.profile/1")
    if not text.startswith((b"{", b"[")):
        raise NpuportError(f"{p}: not a profile", _WHAT_IMPORTS, "a file that is not JSON" if text else "an empty file")


def read_any(path: str | Path) -> Trace:
    """The profile a user holds, by what it is: an Ascend PyTorch profiler output folder (`*_ascend_pt`), an Nsight
    Systems SQLite export, else a torch.profiler / Kineto Chrome trace (.json / .json.gz)."""
    p = Path(path)
    if not p.exists():
        raise NpuportError(f"no profile at {p}", _WHAT_IMPORTS, "no such file or folder")
    if p.is_dir() or is_ascend_output(p):
        trace = read_ascend(p)
    elif is_nsys_sqlite(p):
        trace = read_nsys(p)
    else:
        _sniff(p)
        trace = read_trace(p)
    if not trace.ops and not trace.kernels and not trace.steps:  # valid JSON, nothing a profile is made of
        raise NpuportError(f"{p} holds no op, kernel or step", "a profile of at least one step (torch.profiler, the "
                           "Ascend profiler, Nsight Systems)", f"{trace.cpu_ops} CPU events, 0 ops, 0 kernels")
    return trace


def import_trace(path: str | Path) -> dict[str, Any]:
    """A profile (Kineto trace, Ascend profiler folder, Nsight SQLite export) -> the artifact dict."""
    return to_artifact(read_any(path))


def write_artifact(artifact: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(artifact, indent=1) + "\n", encoding="utf-8")


_SCHEMA_FILE = Path(__file__).with_name("artifact.schema.json")


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema  # noqa: PLC0415 - read only when an artifact is loaded

    schema = json.loads(_SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number an artifact holds")


def _finite(text: str) -> float:
    """A JSON number as a float; one too large for a float (1e999) reads as infinity, which no artifact holds."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is not a number an artifact holds")
    return value


def _where(error: Any) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".") or "the top level"


def _expected(error: Any) -> str:
    rule, value = error.validator, error.validator_value
    if rule == "required":
        return "the fields " + ", ".join(value)
    if rule == "type":
        return f"a value of type {value}"
    if rule in ("minimum", "exclusiveMinimum"):
        return f"a number {'>=' if rule == 'minimum' else '>'} {value}"
    if rule == "maximum":
        return f"a number <= {value}"
    if rule in ("enum", "const"):
        return "one of " + ", ".join(json.dumps(v) for v in (value if rule == "enum" else [value]))
    return str(error.message)


def _received(error: Any) -> str:
    if error.validator == "required":
        return "no " + ", ".join(k for k in error.validator_value if k not in error.instance)
    text = json.dumps(error.instance)
    return text if len(text) <= 80 else text[:77] + "..."


def check_artifact(data: Any, p: Path) -> dict[str, Any]:
    """The artifact's schema (artifact.schema.json): every field a reader uses has its type, times and counts are
    not negative; the first violation is one NpuportError line naming the field."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise NpuportError(f"{p}: not a profile artifact", f"schema {SCHEMA} (from `npuport profile import` or `record`)",
                           str(got))
    from jsonschema.exceptions import best_match  # noqa: PLC0415 - as above

    error = best_match(_validator().iter_errors(data))
    if error is not None:
        raise NpuportError(f"{p}: malformed profile artifact at {_where(error)}", _expected(error), _received(error))
    return data


def is_artifact(p: Path) -> bool:
    """Whether a file is an npuport profile artifact rather than a trace: a JSON object whose top-level "schema" is
    npuport.profile/... wherever it stands (an artifact rewritten with sorted keys has it last). A trace (its first
    bytes gzip, or a "traceEvents" near the start) is told apart without reading it whole."""
    with p.open("rb") as fh:
        head = fh.read(4096)
    if head[:2] == b"\x1f\x8b" or b'"traceEvents"' in head or not head.lstrip().startswith(b"{"):
        return False
    if b'"npuport.profile/' in head:
        return True
    try:  # a small file whose schema is not near its start: read it (artifacts are kilobytes to a few megabytes)
        if p.stat().st_size > 64 << 20:
            return False
        data = json.loads(p.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("npuport.profile/")


def load_artifact(path: str | Path) -> dict[str, Any]:
    """Read an artifact back, checking it against its schema; anything else is one NpuportError line."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise NpuportError(f"cannot read profile artifact {p}", "a file written by `npuport profile import` or `record`",
                           f"{type(exc).__name__}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b" or p.suffix in (".sqlite", ".db") or raw[:16] == b"SQLite format 3\x00":
        raise NpuportError(f"{p} is a trace, not a profile artifact", "the artifact `npuport profile import TRACE -o "
                           "ART.json` writes from it", "a compressed trace or a database")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except UnicodeDecodeError as exc:
        raise NpuportError(f"{p}: not a profile artifact", f"JSON of schema {SCHEMA}", f"binary data ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise NpuportError(f"{p}: not a profile artifact", f"JSON of schema {SCHEMA}", f"{exc.msg} at char {exc.pos}") from None
    except ValueError as exc:  # NaN / Infinity
        raise NpuportError(f"{p}: malformed profile artifact", "finite numbers", str(exc)) from None
    if isinstance(data, dict) and "traceEvents" in data:
        raise NpuportError(f"{p} is a trace, not a profile artifact", "the artifact `npuport profile import TRACE -o "
                           "ART.json` writes from it", "a Chrome trace (traceEvents)")
    return check_artifact(data, p)
