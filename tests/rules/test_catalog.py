"""The shipped behaviours.yaml loads, and broken rules fail at load naming the file, the rule and the field."""

from __future__ import annotations

import copy

import pytest

from npuport.cost.roofline import load_chips
from npuport.errors import MappingError
from npuport.mappings import load_yaml
from npuport.rules import load_rules, predicates
from npuport.rules.catalog import rules_from_data


def test_shipped_rules_load() -> None:
    rules = load_rules()
    assert len(rules) >= 40
    assert len({r.id for r in rules}) == len(rules)
    for r in rules:
        assert r.source and r.fix and r.explanation and r.fact, r.id


def _doc() -> dict:
    return copy.deepcopy(load_yaml("behaviours.yaml"))


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r.update(levle="error"), "levle"),
        (lambda r: r.pop("fix"), "fix"),
        (lambda r: r.update(level="fatal"), "level"),
        (lambda r: r.update(impact="speed"), "impact"),
        (lambda r: r.update(chips=["Ascend999"]), "chips"),
        (lambda r: r.update(levels={"Ascend910A": "loud"}), "levels.Ascend910A"),
        (lambda r: r.update(torch_npu="~2.1"), "torch_npu"),
        (lambda r: r["match"].update(opps=["mm"]), "opps"),
        (lambda r: r["match"].update(predicate="no_such_predicate"), "match.predicate"),
        (lambda r: r["match"].update(predicate={"name": "coverage_status", "bogus": 1}), "match.predicate"),
        (lambda r: r["match"].update(where=[{"arg": "dtype", "approx": 1}]), "match.where[0].approx"),
        (lambda r: r.update(id="NPX1"), "id"),
    ],
)
def test_broken_rule_names_file_rule_and_field(mutate, field: str) -> None:  # noqa: ANN001
    doc = _doc()
    mutate(doc["rules"][0])
    with pytest.raises(MappingError) as info:
        rules_from_data(doc, set(load_chips()))
    text = str(info.value)
    assert "behaviours.yaml" in text and field in text
    assert doc["rules"][0].get("id", "NPB001") in text or "NPX1" in text


def test_duplicate_rule_id_is_rejected() -> None:
    doc = _doc()
    doc["rules"].append(copy.deepcopy(doc["rules"][0]))
    with pytest.raises(MappingError, match="duplicate rule id"):
        rules_from_data(doc, set(load_chips()))


def test_duplicate_predicate_registration_fails_at_import() -> None:
    with pytest.raises(RuntimeError, match="registered twice"):
        predicates.predicate("dropout_active")(lambda site, ctx: None)


def test_every_registered_predicate_is_used() -> None:
    used = {r.predicate for r in load_rules() if r.predicate}
    assert used == set(predicates.REGISTRY)
