"""The Ascend PyTorch profiler (torch_npu.profiler) around the profiled steps of `npuport profile record --dev npu`.

It is set the way the CUDA path sets torch.profiler, in torch_npu's own API (Ascend/pytorch@9e73e708,
torch_npu/profiler/profiler.py, scheduler.py, experimental_config.py):

- activities CPU and NPU; `schedule(wait=0, warmup=W, active=S, repeat=1)`, so the warm-up steps are not recorded;
- `record_shapes=True`; no memory, stack, module or FLOP collection (each adds host time to the steps measured);
- `experimental_config`: profiler level 1 (level 0 leaves the shapes out of kernel_details.csv), no AI Core
  metrics (their columns are not read, and collecting them is work on the device), the text export (trace_view.json
  and the CSVs, which npuport.profile.ascend reads; the .db export is not read);
- `on_trace_ready=tensorboard_trace_handler(DIR, analyse_flag=True, async_mode=False)`: the handler writes one
  `{worker}_{timestamp}_ascend_pt` folder under DIR and parses it into its ASCEND_PROFILER_OUTPUT before the
  profiler's exit returns.

The module path of every op comes from npuport's own record_function marks (npuport.profile.record), which torch_npu
writes as cpu_ops; the importer reads them (npuport.profile.ascend). No NPU was available where this was written:
the branch has run against the CPU stand-in of torch_npu (npuport.devices.standin), whose profiler writes the same
text export from torch.profiler's CPU events, with no device tasks.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from npuport.errors import NpuportError

RANK_SUFFIX = "_ascend_pt"
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
MARKER = "npuport_record.json"  # in an export npuport kept: the one kind of folder it may replace


def npu_profile(npu: Any, out_dir: Path, warmup: int, steps: int) -> Any:
    """torch_npu.profiler.profile(...) for `warmup` unrecorded and `steps` recorded steps, its export under
    `out_dir`; `npu` is the torch_npu module (or its stand-in). Keywords a release does not know are left out (its
    default is what is asked for): `async_mode` of the trace handler and `data_simplification` came after the
    torch 2.1 releases (absent at Ascend/pytorch v6.0.0-pytorch2.1.0, present at v7.0.0-pytorch2.1.0)."""
    p = npu.profiler
    config = _call(p._ExperimentalConfig, profiler_level=p.ProfilerLevel.Level1, aic_metrics=p.AiCMetrics.AiCoreNone,
                   export_type=p.ExportType.Text, data_simplification=True)
    handler = _call(p.tensorboard_trace_handler, dir_name=str(out_dir), analyse_flag=True, async_mode=False)
    return p.profile(activities=[p.ProfilerActivity.CPU, p.ProfilerActivity.NPU],
                     schedule=p.schedule(wait=0, warmup=warmup, active=steps, repeat=1), on_trace_ready=handler,
                     record_shapes=True, profile_memory=False, with_stack=False, with_modules=False,
                     experimental_config=config)


def _call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """fn(**kwargs) less the keywords fn does not take (when its signature can be read)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**kwargs)
    if any(q.kind is inspect.Parameter.VAR_KEYWORD for q in params.values()):
        return fn(**kwargs)
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def exported(folder: Path) -> Path:
    """The one `*_ascend_pt` folder the handler wrote under `folder`, parsed (torch_npu's profiler swallows its own
    errors, so a failed analysis shows only as a folder without its ASCEND_PROFILER_OUTPUT)."""
    found = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.endswith(RANK_SUFFIX))
    if len(found) != 1:
        raise NpuportError("the Ascend profiler wrote no single export", f"one *{RANK_SUFFIX} folder",
                           ", ".join(p.name for p in folder.iterdir()) or "nothing")
    if not (found[0] / OUTPUT_DIR).is_dir():
        raise NpuportError("the Ascend profiler did not parse what it recorded", f"{found[0].name}/{OUTPUT_DIR}",
                           ", ".join(sorted(p.name for p in found[0].iterdir())) or "an empty folder")
    return found[0]


def export_path(out_dir: Path, scenario: str) -> Path:
    """Where the export of `scenario` is kept; refused before anything runs when that path holds something npuport
    did not write there (a file, a link, someone's folder): only an earlier recording's export is ever replaced."""
    final = out_dir / f"{scenario}{RANK_SUFFIX}"
    if final.is_symlink() or final.exists() and not (final.is_dir() and (final / MARKER).is_file()):
        raise NpuportError(f"{final} exists and is not an export npuport profile record kept",
                           "a free path for the export, or another --out-dir", "a link" if final.is_symlink()
                           else "a file" if not final.is_dir() else "a folder without " + MARKER)
    return final


def keep_export(export: Path, out_dir: Path, scenario: str) -> Path:
    """Move the export beside the artifact as OUT_DIR/SCENARIO_ascend_pt (the suffix msprof-analyze looks for), marked
    as npuport's; an earlier recording's export there is replaced (the CLI asks for --force first), the new one put
    in place before the old one is removed."""
    final = export_path(out_dir, scenario)
    (export / MARKER).write_text(json.dumps({"written_by": "npuport profile record", "scenario": scenario}) + "\n",
                                 encoding="utf-8")
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
    shutil.move(str(export), str(final))
    if old is not None:
        shutil.rmtree(old)
    return final
