from __future__ import annotations

from dataclasses import dataclass

import pytest

from npuport.errors import NpuportError
from npuport.rules import fail_on, suppress


@dataclass
class Item:
    id: str
    level: str


ITEMS = [Item("NPB001", "warning"), Item("NPB013", "error"), Item("NPS004", "info"), Item("NPS012", "warning"), Item("NPS020", "error")]


@pytest.mark.parametrize(
    "patterns, left",
    [
        (["NPB001"], ["NPB013", "NPS004", "NPS012", "NPS020"]),
        (["NPS010-NPS019"], ["NPB001", "NPB013", "NPS004", "NPS020"]),
        (["NPS010-019"], ["NPB001", "NPB013", "NPS004", "NPS020"]),
        (["NPB0*"], ["NPS004", "NPS012", "NPS020"]),
        (["npb001", "NPS*"], ["NPB013"]),
        ([], ["NPB001", "NPB013", "NPS004", "NPS012", "NPS020"]),
    ],
)
def test_suppress(patterns: list[str], left: list[str]) -> None:
    assert [i.id for i in suppress(ITEMS, patterns)] == left


@pytest.mark.parametrize("bad", ["NPS019-NPS010", "NPS001-NPB009", "rm -rf", "NP-"])
def test_bad_pattern_is_a_user_error(bad: str) -> None:
    with pytest.raises(NpuportError):
        suppress(ITEMS, [bad])


def test_fail_on() -> None:
    assert fail_on(ITEMS, "error") and fail_on(ITEMS, "warning") and fail_on(ITEMS, "info")
    assert not fail_on([Item("NPB001", "warning")], "error")
    assert not fail_on(ITEMS, None)
    assert not fail_on(suppress(ITEMS, ["NPB013", "NPS020"]), "error")
    with pytest.raises(NpuportError):
        fail_on(ITEMS, "fatal")
