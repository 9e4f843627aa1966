"""CI helpers shared by behaviour findings (NPB...) and source diagnostics (NPS...): suppress by id, id range
or wildcard, and decide whether a `--fail-on` threshold is hit (the CLI then exits 1)."""

from __future__ import annotations

import fnmatch
import re
from typing import Iterable, Protocol, Sequence, TypeVar

from npuport.errors import NpuportError

LEVEL_RANK = {"info": 0, "warning": 1, "error": 2}
_ID = re.compile(r"^([A-Z]+)(\d+)$")
_RANGE = re.compile(r"^([A-Z]+)(\d+)-([A-Z]+)?(\d+)$")
_GLOB = re.compile(r"^[A-Z0-9*?\[\]]+$")


class HasIdLevel(Protocol):
    id: str
    level: str


T = TypeVar("T", bound=HasIdLevel)


def _matcher(pattern: str):  # noqa: ANN202 - returns a small closure
    p = pattern.strip().upper()
    m = _RANGE.match(p)
    if m:
        prefix, lo, prefix2, hi = m.group(1), int(m.group(2)), m.group(3) or m.group(1), int(m.group(4))
        if prefix2 != prefix or lo > hi:
            raise NpuportError(f"bad suppression range {pattern!r}", "a range with one prefix, low to high, e.g. NPS010-NPS019", pattern)

        def in_range(rid: str) -> bool:
            mm = _ID.match(rid)
            return mm is not None and mm.group(1) == prefix and lo <= int(mm.group(2)) <= hi

        return in_range
    if _ID.match(p) or (_GLOB.match(p) and any(ch in p for ch in "*?[")):
        return lambda rid: fnmatch.fnmatchcase(rid, p)
    raise NpuportError(f"bad suppression pattern {pattern!r}", "an id (NPB001), a range (NPS010-NPS019) or a wildcard (NPB0*)", pattern)


def suppress(items: Iterable[T], patterns: Sequence[str]) -> list[T]:
    """`items` without those whose id matches any pattern ('NPB001', 'NPS010-NPS019', 'NPB0*')."""
    matchers = [_matcher(p) for p in patterns if p.strip()]
    return [it for it in items if not any(m(it.id) for m in matchers)]


def fail_on(items: Iterable[HasIdLevel], level: str | None) -> bool:
    """True when any item is at `level` or above ('error' | 'warning' | 'info'); None never fails."""
    if level is None:
        return False
    if level not in LEVEL_RANK:
        raise NpuportError(f"bad --fail-on level {level!r}", "error, warning or info", level)
    floor = LEVEL_RANK[level]
    return any(LEVEL_RANK.get(it.level, 0) >= floor for it in items)
