"""bench: the audit's hot ops rebuilt with their recorded shapes and timed on the current device.

Pipeline: audit (or its JSON) -> `cases` (one per op x shape x dtypes, with the recorded arguments) ->
`rebuild` (random tensors of the recorded shape / dtype / stride, several sets for cache rotation) ->
`timer` (warm-up, device events per repetition, median and spread) -> `harness` (candidates side by side,
roofline attainment, kernel-path check) -> `endtoend` (whole step vs the sum of its ops) -> `report`.

Nothing here imports torch_npu or touches CUDA at import time: `device` does that lazily.
"""

from __future__ import annotations

SCHEMA = "npuport.bench/1"
