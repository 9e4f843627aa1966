"""Per-release counts of the checked-in data (docs/coverage.md's tables come from here, via the sync script)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from npuport.coverage.conditions import load_conditions
from npuport.coverage.database import available_versions, load
from npuport.coverage.resolve import resolve_all


@dataclass(frozen=True)
class ReleaseCounts:
    version: str
    torch: str
    registered: int  # aten overloads torch_npu registers (yaml, validated against the paired torch)
    composite_overrides: int  # of which CompositeImplicitAutograd in torch (NPU runs them as one op)
    acl_only: int
    op_api: int  # with an aclnn path
    dvm: int
    custom: int
    statuses: Counter  # resolution of every aten overload of the paired torch + every npu:: op (no call: never
    # cpu-path or conditional; those need a recorded call or a chip, see `conditioned`)
    implicit: int
    explicit: int
    switch: bool
    conditioned: int = 0  # registered overloads with a recorded conditional host path (coverage/conditions.yaml)


def release_counts(version: str) -> ReleaseCounts:
    db = load(version)
    resolved = resolve_all(version).values()
    return ReleaseCounts(
        version=db.version,
        torch=db.torch,
        registered=len(db.native),
        composite_overrides=len(db.native_composites),
        acl_only=sum(p == ("acl_op",) for p in db.native.values()),
        op_api=sum("op_api" in p for p in db.native.values()),
        dvm=sum("dvm" in p for p in db.native.values()),
        custom=len(db.custom),
        statuses=Counter(r.status for r in resolved),
        implicit=sum(r.composite_kind == "implicit" for r in resolved),
        explicit=sum(r.composite_kind == "explicit" for r in resolved),
        switch=db.fallback_error_env is not None,
        conditioned=len({op for e in load_conditions().entries if version in e.releases for op in e.ops}),
    )


def markdown_table() -> str:
    head = ("| torch_npu | torch | registered aten | CIA overrides | op_api | acl_op only | dvm | npu:: custom "
            "| native | composite (implicit/explicit) | cpu-fallback | unsupported | fallback switch |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for version in available_versions():
        c = release_counts(version)
        s = c.statuses
        lines.append(
            f"| {c.version} | {c.torch} | {c.registered} | {c.composite_overrides} | {c.op_api} | {c.acl_only} | {c.dvm} "
            f"| {c.custom} | {s['native']} | {s['composite']} ({c.implicit}/{c.explicit}) | {s['cpu-fallback']} "
            f"| {s['unsupported']} | {'yes' if c.switch else 'no'} |"
        )
    return "\n".join(lines)
