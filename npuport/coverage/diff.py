"""What changed between two torch_npu releases, op by op (resolved statuses, not raw yaml lines)."""

from __future__ import annotations

from dataclasses import dataclass

from npuport.coverage.resolve import RUNS_ON_NPU, Resolution, resolve, resolve_all


@dataclass(frozen=True)
class Change:
    op: str
    before: Resolution
    after: Resolution

    def describe(self) -> str:
        def one(r: Resolution) -> str:
            return r.status + (f" ({', '.join(r.paths)})" if r.paths else "")

        return f"{self.op}: {one(self.before)} -> {one(self.after)}"


@dataclass(frozen=True)
class CoverageDiff:
    old: str
    new: str
    added: tuple[Change, ...]  # runs on the NPU in `new`, not in `old`
    removed: tuple[Change, ...]  # ran on the NPU in `old`, not in `new`
    changed: tuple[Change, ...]  # any other change of status or implementation paths

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_versions(old: str, new: str) -> CoverageDiff:
    before, after = resolve_all(old), resolve_all(new)
    added: list[Change] = []
    removed: list[Change] = []
    changed: list[Change] = []
    for op in sorted(set(before) | set(after)):
        a = before.get(op) or _absent(op, old)
        b = after.get(op) or _absent(op, new)
        if (a.status, a.paths) == (b.status, b.paths):
            continue
        change = Change(op, a, b)
        was, now = a.status in RUNS_ON_NPU, b.status in RUNS_ON_NPU
        (added if now and not was else removed if was and not now else changed).append(change)
    return CoverageDiff(old, new, tuple(added), tuple(removed), tuple(changed))


def _absent(op: str, version: str) -> Resolution:
    return resolve(op, version)
