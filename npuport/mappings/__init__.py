"""Load the YAML knowledge base under mappings/ and check it against its JSON Schema (mappings/schemas/).

Every fact in mappings/ carries a `source:`; `load_checked` rejects unknown fields, missing required ones and
wrongly typed values at load time, naming file, entry and field, so a typo in a rule never silently disables it.
What a schema cannot say (cross-references between entries and files) stays in the loaders. See docs/mappings.md.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import ValidationError, best_match

from npuport.errors import MappingError, NpuportError
from npuport.mappings import parsed

_SHIPPED = Path(__file__).resolve().parent  # the YAML files ship inside the package, beside this module
SCHEMAS = _SHIPPED / "schemas"  # always the shipped schemas, also when $NPUPORT_MAPPINGS replaces the data


def mappings_dir() -> Path:
    """The mappings directory: $NPUPORT_MAPPINGS if set (tests, a site's own data), else the one shipped in the package."""
    env = os.environ.get("NPUPORT_MAPPINGS")
    path = Path(env) if env else _SHIPPED
    if not path.is_dir():
        raise NpuportError("cannot find npuport's mappings directory", "the package's npuport/mappings or $NPUPORT_MAPPINGS", str(path))
    return path


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int) -> tuple[Any, str]:
    """(data, content key) of one file: from the parsed cache when its bytes were parsed before (npuport.mappings.parsed)."""
    raw = Path(path).read_bytes()
    key = parsed.digest(raw)
    data = parsed.read(key)
    if data is parsed.MISSING:
        data = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        parsed.write(key, data)
    return data, key


def _load(name: str) -> tuple[Any, str]:
    path = mappings_dir() / name
    if not path.is_file():
        raise NpuportError(f"mapping file {name} is missing", f"a file at {path}", "no such file")
    try:
        return _load_cached(str(path), path.stat().st_mtime_ns)
    except yaml.YAMLError as exc:
        raise NpuportError(f"mapping file {name} is not valid YAML", "YAML", str(exc).splitlines()[0]) from None


def load_yaml(name: str) -> Any:
    """Parse mappings/<name> (cached in this process by path and modification time, across processes by content;
    never executes anything)."""
    return _load(name)[0]


def schema_path(name: str) -> Path:
    """The schema of mappings/<name>: 'hardware.yaml' -> schemas/hardware.schema.json, 'coverage/host_link.yaml' ->
    schemas/coverage.host_link.schema.json; every coverage/torch_npu-<version>.yaml shares coverage.torch_npu."""
    stem = name.removesuffix(".yaml")
    if stem.startswith("coverage/torch_npu-"):
        stem = "coverage/torch_npu"
    return SCHEMAS / (stem.replace("/", ".") + ".schema.json")


@functools.lru_cache(maxsize=32)
def _schema_key(path: str) -> str:
    return parsed.digest(Path(path).read_bytes())


@functools.lru_cache(maxsize=32)
def _validator(path: str) -> Any:
    """The compiled validator of one schema file. The schemas ship with the code (NPUPORT_MAPPINGS replaces the data,
    never the schemas), so checking them against the meta-schema is left to tests/test_mappings_schemas.py: at run
    time it would cost more than validating every file."""
    with open(path, encoding="utf-8") as fh:
        schema = json.load(fh)
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)


_VALIDATED: set[tuple[str, str]] = set()  # (content key, schema key) of files that passed in this process


def load_checked(name: str) -> Any:
    """Parse mappings/<name> and validate it against its schema (once per file content and schema: a pair that
    passed before, in any process, is not checked again); MappingError on a violation."""
    data, key = _load(name)
    schema = schema_path(name)
    pair = (key, _schema_key(str(schema)) if schema.is_file() else "")
    if pair not in _VALIDATED:
        if not (pair[1] and parsed.known_valid(*pair)):
            check_document(data, name)
            if pair[1]:
                parsed.mark_valid(*pair)
        _VALIDATED.add(pair)
    return data


def check_document(data: Any, name: str) -> None:
    """Validate parsed YAML against the schema of mappings/<name>, raising MappingError(file, entry, field, problem)."""
    schema = schema_path(name)
    if not schema.is_file():
        raise NpuportError(f"no schema for mapping file {name}", f"a file at {schema}", "no such file")
    validator = _validator(str(schema))
    if validator.is_valid(data):
        return
    error = best_match(validator.iter_errors(data))
    raise _mapping_error(name, data, error) from None


def _render(parts: Sequence[Any]) -> str:
    """['rules', 3, 'match', 'where', 0] -> 'rules[3].match.where[0]'."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _mapping_error(name: str, data: Any, error: ValidationError) -> MappingError:
    path: list[Any] = list(error.absolute_path)
    kind, value, instance = error.validator, error.validator_value, error.instance
    if "propertyNames" in error.schema_path:  # the failing value is a key of the object at `path`
        path.append(instance)
        problem = f"name does not match {value}" if kind == "pattern" else f"bad name: {error.message}"
    elif kind == "required":
        path.append(next(k for k in value if k not in instance))
        problem = "missing required field"
    elif kind == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        path.append(next(k for k in instance if k not in known and not any(re.search(p, str(k)) for p in patterns)))
        problem = "unknown field"
    elif kind == "type":
        wanted = "/".join(value) if isinstance(value, list) else str(value)
        problem = f"expected {wanted}, got {_json_type(instance)}"
    elif kind == "enum":
        problem = f"expected one of {', '.join(map(str, value))}, got {instance!r}"
    elif kind == "const":
        problem = f"expected {value!r}, got {instance!r}"
    elif kind == "pattern":
        problem = f"{instance!r} does not match {value}"
    elif kind in ("anyOf", "oneOf") and all(isinstance(s, dict) and "type" in s for s in value):
        problem = f"expected {' or '.join(str(s['type']) for s in value)}, got {_json_type(instance)}"
    else:
        problem = error.message
    entry, field = _entry_and_field(data, path)
    return MappingError(name, entry, field, problem)


def _entry_and_field(data: Any, path: list[Any]) -> tuple[str, str]:
    """Entry: the innermost object on the path with a string `id` (named by it), else the failing value's parent;
    field: the rest of the path."""
    node, anchor = data, -1
    for i, part in enumerate(path[:-1]):
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(node, dict) and isinstance(node.get("id"), str):
            anchor = i
    if anchor >= 0:
        node = data
        for part in path[: anchor + 1]:
            node = node[part]
        return node["id"], _render(path[anchor + 1:]) or "-"
    return _render(path[:-1]) or "<top>", _render(path[-1:]) or "-"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number"}.get(type(value), type(value).__name__)

