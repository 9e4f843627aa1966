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

import json
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


def read_any(path: str | Path) -> Trace:
    """The profile a user holds, by what it is: an Ascend PyTorch profiler output folder (`*_ascend_pt`), an Nsight
    Systems SQLite export, else a torch.profiler / Kineto Chrome trace (.json / .json.gz)."""
    p = Path(path)
    if p.is_dir() or is_ascend_output(p):
        trace = read_ascend(p)
    elif p.is_file() and is_nsys_sqlite(p):
        trace = read_nsys(p)
    else:
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


def load_artifact(path: str | Path) -> dict[str, Any]:
    """Read an artifact back, checking its schema; anything else is one NpuportError line."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise NpuportError(f"cannot read profile artifact {p}", "a file written by `npuport profile import`",
                           f"{type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise NpuportError(f"{p}: not a profile artifact", f"JSON of schema {SCHEMA}", f"{exc.msg} at char {exc.pos}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise NpuportError(f"{p}: not a profile artifact", f"schema {SCHEMA} (from `npuport profile import`)", str(got))
    ops = data.get("ops")
    if not isinstance(ops, list) or not all(isinstance(r, dict) and isinstance(r.get("op"), str)
                                            and isinstance(r.get("device_s"), (int, float)) for r in ops):
        raise NpuportError(f"{p}: malformed profile artifact", "an ops list of {op, calls, host_s, device_s, share}", "ops")
    for key in ("kernel_names", "kernel_classes"):  # optional; read by npuport.profile.kernel_classes.of_artifact
        rows = data.get(key)
        if rows is not None and not (isinstance(rows, dict) and all(
                isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("kernels"), int)
                and isinstance(v.get("device_s"), (int, float)) and isinstance(v.get("top", {}), dict)
                for k, v in rows.items())):
            raise NpuportError(f"{p}: malformed profile artifact", f"{key} as {{name: {{kernels, device_s}}}}", key)
    return data
