"""Behaviour rules over recorded ops (mappings/behaviours.yaml) and the CUDA-API source scan.

    load_rules() -> list[Rule]
    evaluate(traces, chip=..., torch_npu=..., time_share=..., reproducibility=...) -> list[Finding]
    suppress(items, patterns) / fail_on(items, level)
    npuport.scan.source_scan.scan(model_file) -> ScanReport
"""

from npuport.rules.catalog import Rule, load_rules
from npuport.rules.engine import Evidence, Finding, evaluate
from npuport.rules.suppress import fail_on, suppress

__all__ = ["Rule", "load_rules", "Evidence", "Finding", "evaluate", "suppress", "fail_on"]
