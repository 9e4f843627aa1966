"""bench: the audit's hot ops rebuilt with their recorded shapes and timed on the current device.

Pipeline (`runner.run_bench`): the audit's trace and cost stages (or its JSON, `from_json`) -> `cases` (one per
op x shape x dtypes, with the recorded arguments) -> `rebuild` (random tensors of the recorded shape / dtype /
stride, several sets for cache rotation) -> `harness` (`candidates` side by side, timed by npuport.devices.timer,
roofline attainment, the `kernels` path check) -> `endtoend` (whole step vs the sum of its ops) -> `emit` (repro
scripts) -> `runner.BenchReport` -> `json_form` (schema npuport.bench/1, shown by npuport.render.bench_text).

Nothing here imports torch_npu or touches CUDA at import time: npuport.devices does that, lazily.
"""

from __future__ import annotations

SCHEMA = "npuport.bench/1"
