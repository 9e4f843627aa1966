"""Load the YAML knowledge base under mappings/ and check it against small declarative schemas.

Every fact in mappings/ carries a `source:`; the loaders here reject unknown fields and missing required ones at
load time, so a typo in a rule never silently disables it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from npuport.errors import MappingError, NpuportError

_SHIPPED = Path(__file__).resolve().parent  # the YAML files ship inside the package, beside this module


def mappings_dir() -> Path:
    """The mappings directory: $NPUPORT_MAPPINGS if set (tests, a site's own data), else the one shipped in the package."""
    env = os.environ.get("NPUPORT_MAPPINGS")
    path = Path(env) if env else _SHIPPED
    if not path.is_dir():
        raise NpuportError("cannot find npuport's mappings directory", "the package's npuport/mappings or $NPUPORT_MAPPINGS", str(path))
    return path


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=loader)


def load_yaml(name: str) -> Any:
    """Parse mappings/<name> (cached by path and modification time; never executes anything)."""
    path = mappings_dir() / name
    if not path.is_file():
        raise NpuportError(f"mapping file {name} is missing", f"a file at {path}", "no such file")
    try:
        return _load_cached(str(path), path.stat().st_mtime_ns)
    except yaml.YAMLError as exc:
        raise NpuportError(f"mapping file {name} is not valid YAML", "YAML", str(exc).splitlines()[0]) from None


def check_fields(
    data: Mapping[str, Any],
    *,
    file: str,
    entry: str,
    required: Mapping[str, type | tuple[type, ...]],
    optional: Mapping[str, type | tuple[type, ...]] | None = None,
) -> None:
    """Reject unknown fields, missing required fields and wrongly typed values, naming file, entry and field."""
    optional = optional or {}
    if not isinstance(data, Mapping):
        raise MappingError(file, entry, "-", f"expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in required and key not in optional:
            raise MappingError(file, entry, str(key), "unknown field")
    for key, kind in required.items():
        if key not in data:
            raise MappingError(file, entry, key, "missing required field")
    for key, value in data.items():
        kind = required.get(key) or optional.get(key)
        if kind is not None and value is not None and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise MappingError(file, entry, str(key), f"expected {names}, got {type(value).__name__}")
