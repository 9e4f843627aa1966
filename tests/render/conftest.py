from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npuport.api import audit_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def gpt_audit() -> dict[str, Any]:
    """A small real audit (the GPT example, one short prefill) in its JSON form, as a renderer receives it."""
    _, data = audit_model(model=str(ROOT / "examples" / "gpt" / "model.py"), scenarios=["prefill:batch=1,seq=64"])
    return json.loads(json.dumps(data))
