"""Behaviour rules over recorded ops (mappings/behaviours.yaml): where an op behaves differently on the NPU than on CUDA.

    load_rules() -> list[Rule]
    evaluate(traces, chip=..., torch_npu=..., time_share=..., reproducibility=...) -> list[Finding]
    suppress(items, patterns) / fail_on(items, level)     (shared with the source scan's NPS diagnostics)

The CUDA-API source scan is npuport.scan.source_scan; the audit's findings stage runs both.
"""

from npuport.rules.catalog import Rule, load_rules
from npuport.rules.engine import Evidence, Finding, evaluate
from npuport.rules.suppress import fail_on, suppress

__all__ = ["Rule", "load_rules", "Evidence", "Finding", "evaluate", "suppress", "fail_on"]
