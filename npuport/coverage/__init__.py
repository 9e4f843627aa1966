"""Per-overload coverage of torch_npu releases: which aten ops run natively, decompose, fall back to the CPU or fail.

Data: mappings/coverage/torch_npu-<version>.yaml, generated from the real wheels by
scripts/sync_torch_npu_coverage.py (schema and decision rules: docs/coverage.md). Stable API for the audit:

    available_versions() / default_version()
    resolve(op, version=None, *, children=None, call=None, chip=None, cann=None) -> Resolution
    resolve_calls(op, version, calls, *, chip=None, cann=None) -> CallsResolution;  has_conditions(op, version=None)
    host_paths(op, version=None) -> tuple[HostPath, ...]: the recorded host paths of a kernel, read or carried
    load_conditions() / conditions_for(op, version): conditional host paths (mappings/coverage/conditions.yaml)
    resolve_composite_children(op, children, version=None) -> Resolution
    native_composites(version=None) -> frozenset[str]
    fallback_cost_s(bytes_moved, link_bytes_per_s=None) -> float;  FALLBACK_ERROR_ENV
    custom_op_schema(name, version=None) -> str | None
    earliest_without_fallback(ops) -> str | None;  resolve_all(version=None)
"""

from __future__ import annotations

from npuport.coverage.conditions import ConditionEntry, Verdict, cann_key, conditions_for, load_conditions
from npuport.coverage.database import CoverageDB, available_versions, default_version, load
from npuport.coverage.fallback import FALLBACK_ERROR_ENV, fallback_cost_s, first_release_with_switch, link_rate
from npuport.coverage.names import normalize_op
from npuport.coverage.resolve import (
    ACL_ONLY_RISK,
    LEAVES_NPU,
    STATUSES,
    CallsResolution,
    HostPath,
    Resolution,
    custom_op_schema,
    earliest_without_fallback,
    has_conditions,
    host_paths,
    native_composites,
    resolve,
    resolve_all,
    resolve_calls,
    resolve_composite_children,
)

__all__ = [
    "ACL_ONLY_RISK", "FALLBACK_ERROR_ENV", "LEAVES_NPU", "STATUSES", "CallsResolution", "ConditionEntry", "CoverageDB",
    "HostPath", "Resolution", "Verdict", "available_versions", "cann_key", "conditions_for", "custom_op_schema",
    "default_version", "earliest_without_fallback", "fallback_cost_s", "first_release_with_switch", "has_conditions",
    "host_paths", "link_rate", "load", "load_conditions", "native_composites", "normalize_op", "resolve", "resolve_all",
    "resolve_calls", "resolve_composite_children",
]
