"""Mapping files kept parsed: a YAML file's data stored as JSON under the cache folder (npuport.cachedir), keyed by
the sha256 of the file's bytes, and a mark for each (file bytes, schema bytes) pair that passed validation.

Why: the audit reads every torch_npu release's coverage file when an op runs on the CPU in all of them (DeepSeek-V3's
did: 24 releases). PyYAML's C loader takes about 29 ms for one (240 KB), `json.loads` of the same data 0.8 ms, and the
schema check about as long as the YAML parse (docs/performance.md). The key is the content, not a timestamp: an edited
file is a new key, a cache entry can never stand for bytes other than its own. A file whose data does not come back
from JSON unchanged (dates, non-string keys) is not cached; a cache that cannot be read or written is skipped.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from npuport.cachedir import cache_dir, write_atomic

FORMAT = b"npuport-mappings-1\0"  # changes when what is stored changes
MISSING = object()


def digest(raw: bytes) -> str:
    return hashlib.sha256(FORMAT + raw).hexdigest()


def _folder() -> Path:
    return cache_dir() / "mappings"


def read(key: str) -> Any:
    """The data stored for `key`, or MISSING."""
    try:
        return json.loads((_folder() / f"{key}.json").read_bytes())
    except (OSError, ValueError):
        return MISSING


def write(key: str, data: Any) -> None:
    try:
        body = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return
    if json.loads(body) != data:  # a tuple, an int key: JSON would hand back something else
        return
    write_atomic(_folder() / f"{key}.json", body.encode(), ".parsed-")


def _mark(key: str, schema_key: str) -> Path:
    return _folder() / "valid" / f"{key}-{schema_key[:32]}"


def known_valid(key: str, schema_key: str) -> bool:
    return _mark(key, schema_key).is_file()


def mark_valid(key: str, schema_key: str) -> None:
    write_atomic(_mark(key, schema_key), b"", ".valid-")
