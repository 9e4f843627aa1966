from __future__ import annotations

import pytest

from npuport.errors import NpuportError
from npuport.model.scenarios import DEFAULTS, fit_to_context, parse_scenario, parse_scenarios


def test_defaults_are_train_prefill_decode():
    names = [s.name for s in parse_scenarios(None)]
    assert names == ["train", "prefill", "decode"]
    assert DEFAULTS["train"].batch == 8 and DEFAULTS["train"].seq == 4096
    assert DEFAULTS["decode"].seq == 1 and DEFAULTS["decode"].past == 4096


def test_options_and_joining():
    scs = parse_scenarios(["decode:batch=4,past=8192", "train:seq=2048+prefill"])
    assert [(s.name, s.batch, s.seq, s.past) for s in scs] == [("decode", 4, 1, 8192), ("train", 8, 2048, 0), ("prefill", 1, 4096, 0)]


@pytest.mark.parametrize("bad", ["infer", "train:batch=0", "train:foo=1", "decode:seq=2", "train:batch=x"])
def test_bad_scenarios_raise_user_errors(bad):
    with pytest.raises(NpuportError):
        parse_scenario(bad)


@pytest.mark.parametrize("bad, needle", [("+", "an empty scenario"), ("train+", "an empty scenario"),
                                         ("prefill:seq=8,seq=9", "seq= given twice"),
                                         ("prefill:batch=99999999999999999999", "a size at most 2,147,483,647")])
def test_empty_joins_and_repeated_keys_rejected(bad, needle):
    with pytest.raises(NpuportError, match=needle):
        parse_scenarios([bad])


def test_one_scenario_where_one_is_taken():
    # parity, bench and profile's single --scenario: a '+' join is refused there, not read as a bad size
    with pytest.raises(NpuportError, match="one scenario expected"):
        parse_scenario("prefill:seq=8+train:seq=8")


def test_duplicate_scenario_rejected():
    with pytest.raises(NpuportError):
        parse_scenarios(["train", "train"])


def test_fit_to_context():
    sc, note = fit_to_context(DEFAULTS["train"], 1024)
    assert sc.seq == 1024 and "shortened" in note
    sc, note = fit_to_context(DEFAULTS["decode"], 2048)
    assert sc.past == 2047 and sc.seq == 1
    assert fit_to_context(DEFAULTS["prefill"], None) == (DEFAULTS["prefill"], None)


@pytest.mark.parametrize("mode", ["eager", "graph", "compile", "reduce-overhead"])
def test_each_mode_parses_and_its_spec_gives_it_back(mode: str) -> None:
    sc = parse_scenario(f"decode:past=64,mode={mode}")
    assert sc.mode == mode and parse_scenario(sc.spec()) == sc
    assert ("mode=" in sc.spec()) == (mode != "eager")


def test_an_unknown_mode_names_every_mode() -> None:
    with pytest.raises(NpuportError) as err:
        parse_scenario("decode:mode=max-autotune")
    assert "mode=reduce-overhead" in str(err.value) and "mode=compile" in str(err.value)
