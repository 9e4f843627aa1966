from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CONFIGS = EXAMPLES / "configs"


@pytest.fixture
def root() -> Path:
    return ROOT
