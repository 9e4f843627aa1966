from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# what npuport caches (parsed mapping files, stamps of verified records) goes to a folder of this test run, never the
# user's cache: set at import, so that modules loaded while tests are collected use it too
os.environ["NPUPORT_CACHE_DIR"] = tempfile.mkdtemp(prefix="npuport-test-cache-")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CONFIGS = EXAMPLES / "configs"


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stamps of verified record files (npuport.parity.verified) go to a per-session folder, never the user's cache."""
    monkeypatch.setenv("NPUPORT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "npuport-cache"))
