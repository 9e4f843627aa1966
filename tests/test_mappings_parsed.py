"""Mapping files kept parsed across processes (npuport.mappings.parsed): the cached data is the YAML's, keyed by the
file's bytes, so an edit is never answered from the cache; a file that failed its schema is never marked valid; a
damaged or unwritable cache only costs the parse."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from npuport import mappings
from npuport.errors import MappingError
from npuport.mappings import parsed

SHIPPED = Path(mappings.__file__).resolve().parent
NAME = "timing.yaml"


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped mappings selected through NPUPORT_MAPPINGS, an empty cache folder, no in-process caches."""
    root = tmp_path / "mappings"
    shutil.copytree(SHIPPED, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    monkeypatch.setenv("NPUPORT_CACHE_DIR", str(tmp_path / "cache"))
    mappings._load_cached.cache_clear()
    mappings._VALIDATED.clear()
    yield root
    mappings._load_cached.cache_clear()
    mappings._VALIDATED.clear()


def _new_process() -> None:
    """What a new process would have: nothing in memory, the cache folder as it is."""
    mappings._load_cached.cache_clear()
    mappings._VALIDATED.clear()


def test_the_second_process_reads_the_cache_and_gets_the_same_data(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = mappings.load_checked(NAME)
    assert first == yaml.safe_load((fresh / NAME).read_text(encoding="utf-8"))
    key = parsed.digest((fresh / NAME).read_bytes())
    assert parsed.read(key) == first
    _new_process()

    def no_yaml(*_a: object, **_k: object) -> None:
        raise AssertionError("parsed again although the cache holds these bytes")

    def no_check(*_a: object, **_k: object) -> None:
        raise AssertionError("validated again although these bytes passed this schema")

    monkeypatch.setattr(mappings.yaml, "load", no_yaml)
    monkeypatch.setattr(mappings, "check_document", no_check)
    assert mappings.load_checked(NAME) == first


def test_an_edited_file_is_parsed_and_checked_again(fresh: Path) -> None:
    mappings.load_checked(NAME)
    doc = yaml.safe_load((fresh / NAME).read_text(encoding="utf-8"))
    doc["unexpected_field"] = 1  # the schema forbids unknown fields
    (fresh / NAME).write_text(yaml.safe_dump(doc), encoding="utf-8")
    st = (fresh / NAME).stat()
    os.utime(fresh / NAME, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime is no help: the key is the content
    _new_process()
    with pytest.raises(MappingError, match="unexpected_field"):
        mappings.load_checked(NAME)
    _new_process()  # and a failed check leaves no mark: the next process refuses it again
    with pytest.raises(MappingError, match="unexpected_field"):
        mappings.load_checked(NAME)


def test_a_damaged_cache_entry_is_parsed_again(fresh: Path) -> None:
    want = mappings.load_checked(NAME)
    key = parsed.digest((fresh / NAME).read_bytes())
    entry = Path(os.environ["NPUPORT_CACHE_DIR"]) / "mappings" / f"{key}.json"
    entry.write_text('{"half": ', encoding="utf-8")
    _new_process()
    assert mappings.load_checked(NAME) == want
    assert parsed.read(key) == want  # rewritten


def test_an_unwritable_cache_still_loads(fresh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("NPUPORT_CACHE_DIR", str(blocker / "cache"))
    assert mappings.load_checked(NAME)["chips"]


def test_data_json_would_change_is_not_cached(fresh: Path) -> None:
    key = parsed.digest(b"when: 2026-12-04\n3: three\n")
    data = yaml.safe_load("when: 2026-12-04\n3: three\n")
    parsed.write(key, data)  # a date and an int key: JSON hands back other types
    assert parsed.read(key) is parsed.MISSING
    parsed.write(key, {"a": [1, 2.5, "x", None]})
    assert parsed.read(key) == {"a": [1, 2.5, "x", None]}
