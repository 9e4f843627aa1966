"""`--emit DIR`: one standalone reproduction script per benchmarked case, runnable without npuport.

Each script rebuilds the inputs (random data, the recorded shapes, dtypes and strides), calls the aten
overload exactly as recorded, times it the way bench does (device events per repetition on cuda / npu, a
monotonic clock on cpu, rotating input sets) and prints one line with the median. `--profile` prints the
kernels it ran. It imports torch only (torch_npu when run with --device npu).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from npuport.bench.cases import BenchCase
from npuport.bench.emitted import MARKER, earlier_scripts
from npuport.bench.rebuild import convert, int_bound, rotation_sets
from npuport.errors import NpuportError

_TEMPLATE = '''#!/usr/bin/env python3
"""Standalone repro of {label} ({dtypes}), {marker}.

{context}
Run: python3 {name} [--device auto|cpu|cuda|npu] [--reps N] [--profile]   (needs torch only)
"""

import argparse
import statistics
import time

import torch

OP = {op!r}
# (shape, dtype, stride or None for contiguous) of each tensor input, as recorded
SPECS = {specs}
INT_BOUND = {bound}  # integer inputs are drawn in [0, INT_BOUND)
SETS = {sets}  # input sets rotated so repeated calls do not hit a warm cache


def make_inputs(device, gen):
    out = []
    for shape, dtype_name, stride in SPECS:
        dtype = getattr(torch, dtype_name)
        n = 0 if 0 in shape else (1 + sum((s - 1) * st for s, st in zip(shape, stride)) if stride else int(torch.tensor(shape).prod()) if shape else 1)
        if dtype == torch.bool:
            flat = torch.rand(n, device=device, generator=gen) < 0.5
        elif dtype.is_floating_point:
            flat = torch.randn(n, device=device, generator=gen, dtype=torch.float32 if dtype.itemsize <= 4 else dtype).to(dtype)
        else:
            flat = torch.randint(0, INT_BOUND, (n,), device=device, dtype=dtype, generator=gen)
        out.append(torch.as_strided(flat, shape, stride) if stride else flat.view(shape) if n else torch.empty(shape, device=device, dtype=dtype))
    return out


def call(t, DEVICE):
    return {call}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="print the kernels one call runs")
    a = p.parse_args()
    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("npu"):
        import torch_npu  # noqa: F401
    backend = getattr(torch, device.split(":")[0], None) if not device.startswith("cpu") else None
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    sets = [make_inputs(device, gen) for _ in range(SETS)]
    for i in range(a.warmup):
        call(sets[i % SETS], device)
    samples = []
    if backend is not None:  # device events per repetition, read after one synchronize
        marks = []
        for i in range(a.reps):
            s, e = backend.Event(enable_timing=True), backend.Event(enable_timing=True)
            s.record()
            call(sets[i % SETS], device)
            e.record()
            marks.append((s, e))
        backend.synchronize()
        samples = [s.elapsed_time(e) for s, e in marks]
        clock = "device events"
    else:  # cpu kernels run synchronously: a monotonic clock around each call brackets the work
        for i in range(a.reps):
            t0 = time.perf_counter_ns()
            call(sets[i % SETS], device)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        clock = "monotonic clock"
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else [samples[0]] * 9
    print(f"{{OP}} [{signature}] on {{device}}: median {{statistics.median(samples):.4f}} ms "
          f"(p10 {{q[0]:.4f}}, p90 {{q[-1]:.4f}}, n={{len(samples)}}, {{clock}}){reference}")
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            call(sets[0], device)
            if backend is not None:
                backend.synchronize()
        print(prof.key_averages().table(sort_by="self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
'''


def _code(tree: Any) -> str:
    if isinstance(tree, list):
        return "[" + ", ".join(_code(x) for x in tree) + "]"
    if isinstance(tree, tuple):
        return "(" + ", ".join(_code(x) for x in tree) + ("," if len(tree) == 1 else "") + ")"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {_code(v)}" for k, v in tree.items()) + "}"
    return str(tree)


def call_source(case: BenchCase) -> str:
    args, kwargs = convert(case, "DEVICE", as_code=True)
    ns, _, rest = case.op.partition("::")
    name, _, overload = rest.partition(".")
    parts = [_code(a) for a in args] + [f"{k}={_code(v)}" for k, v in kwargs.items()]
    return f"torch.ops.{ns}.{name}.{overload or 'default'}({', '.join(parts)})"


def script_name(index: int, case: BenchCase) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", case.op.split("::", 1)[-1]).strip("_")
    return f"{index:02d}_{slug}_{re.sub(r'[^0-9x]+', '-', case.signature).strip('-')[:60]}.py"


def render_script(case: BenchCase, name: str, context: str, measured: str = "",
                  rotate_bytes: int = 256 << 20, memory_cap: int = 4 << 30) -> str:
    specs = "[\n" + "".join(f"    ({tuple(s.shape)!r}, {s.dtype!r}, {tuple(s.stride) if s.stride else None!r}),\n" for s in case.inputs) + "]"
    return _TEMPLATE.format(
        label=case.label, marker=MARKER, dtypes=", ".join(sorted({s.dtype for s in case.inputs})) or "-", context=context, name=name,
        op=case.op, specs=specs, bound=int_bound(case), sets=rotation_sets(case, rotate_bytes, memory_cap),
        call=call_source(case), signature=case.signature, reference=f"  [bench: {measured}]" if measured else "",
    )


def emit_scripts(cases: list[tuple[BenchCase, str]], folder: str | Path, context: str) -> list[Path]:
    """Write one script per (case, measured-summary) into `folder`; returns the paths. Scripts an earlier emit wrote
    there are replaced: the folder then holds this run's scripts alone, beside any files of the user's (the CLI asks
    for --force before it comes to this)."""
    out_dir = Path(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_scripts(out_dir)
    for i, (case, _) in enumerate(cases, 1):  # never write over (or through a link to) a file bench did not write
        path = out_dir / script_name(i, case)
        if (path.exists() or path.is_symlink()) and path not in earlier:
            raise NpuportError(f"{path} exists and was not written by npuport bench", "a folder whose numbered "
                               "scripts bench wrote (they are replaced), or a new one", str(path))
    paths = []
    for i, (case, measured) in enumerate(cases, 1):
        name = script_name(i, case)
        notes = "".join(f"Note: {n}\n" for n in case.notes)
        ctx = (f"{context}\nRecorded {case.calls} call(s) per step in {case.module or '(root)'}; audit estimate "
               f"{case.estimated_s * 1e6:.2f} us per call on {case.estimate_chip}.\n{notes}")
        path = out_dir / name
        path.write_text(render_script(case, name, ctx, measured), encoding="utf-8")
        path.chmod(0o755)
        paths.append(path)
    for old in earlier:  # after the new ones are written: a failed write leaves the earlier run whole
        if old not in paths:
            old.unlink(missing_ok=True)
    return paths
