"""Build one normalized coverage document from a torch-npu wheel and the paired torch wheel (zip files, no install).

The document is what mappings/coverage/torch_npu-<version>.yaml holds; docs/coverage.md describes its schema.
Only the script scripts/sync_torch_npu_coverage.py and the tests call this module.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npuport.coverage.dispatch_tables import CIA, TorchTables, parse_native_functions
from npuport.coverage.npu_yaml import YAML_PATH, NpuRegistrations, parse_npu_yaml
from npuport.errors import NpuportError

SCRIPT_VERSION = 1
SCHEMA = "npuport.coverage/1"
TORCH_YAML_PATH = "torchgen/packaged/ATen/native/native_functions.yaml"
LIBRARY_PATH = "torch_npu/lib/libtorch_npu.so"
FALLBACK_ENV = b"TORCH_NPU_FALLBACK_CPU_DISABLE"


@dataclass(frozen=True)
class WheelInfo:
    path: Path
    name: str  # distribution name from METADATA
    version: str
    requires: tuple[str, ...]
    sha256: str


def wheel_info(path: Path) -> WheelInfo:
    """Name, version, Requires-Dist and sha256 of a wheel file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    with zipfile.ZipFile(path) as zf:
        meta = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        if not meta:
            raise NpuportError("not a wheel: no *.dist-info/METADATA", "a .whl file", str(path))
        lines = zf.read(meta[0]).decode("utf-8", "replace").splitlines()
    fields: dict[str, list[str]] = {}
    for line in lines:
        if not line.strip():
            break  # the description body follows the first blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), []).append(value.strip())
    return WheelInfo(
        path=path,
        name=fields.get("Name", ["?"])[0],
        version=fields.get("Version", ["?"])[0],
        requires=tuple(fields.get("Requires-Dist", [])),
        sha256=digest.hexdigest(),
    )


def paired_torch_version(info: WheelInfo) -> str:
    """'torch==2.13.0.*' / 'torch ==2.1.0' in Requires-Dist -> '2.13.0'."""
    for req in info.requires:
        match = re.match(r"^torch\s*\(?\s*==\s*([0-9][0-9a-zA-Z.+]*?)(?:\.\*)?\s*\)?\s*(;.*)?$", req)
        if match:
            return match.group(1)
    raise NpuportError("torch-npu wheel pins no torch version", "Requires-Dist: torch==X", ", ".join(info.requires))


def read_member(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        try:
            return zf.read(member)
        except KeyError:
            raise NpuportError(f"{member} is missing from the wheel", "a torch/torch-npu wheel", str(path)) from None


def has_fallback_switch(path: Path) -> bool:
    """Does libtorch_npu.so in the wheel read TORCH_NPU_FALLBACK_CPU_DISABLE? (streamed, never extracted)."""
    with zipfile.ZipFile(path) as zf:
        if LIBRARY_PATH not in zf.namelist():
            return False
        tail = b""
        with zf.open(LIBRARY_PATH) as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                if FALLBACK_ENV in tail + block:
                    return True
                tail = block[-len(FALLBACK_ENV):]
    return False


def build_document(npu_wheel: Path, torch_wheel: Path, *, scan_library: bool = True) -> dict[str, Any]:
    """Everything one coverage file holds, as plain data (sorted, ready for write_document)."""
    npu = wheel_info(npu_wheel)
    torch = wheel_info(torch_wheel)
    wanted = paired_torch_version(npu)
    if torch.version.split("+")[0] != wanted:
        raise NpuportError(
            f"torch wheel does not match torch-npu {npu.version}", f"torch {wanted}", f"{torch.path.name} ({torch.version})"
        )
    regs = parse_npu_yaml(read_member(npu_wheel, YAML_PATH))
    tables = parse_native_functions(read_member(torch_wheel, TORCH_YAML_PATH))
    return _document(npu, torch, regs, tables, has_fallback_switch(npu_wheel) if scan_library else False)


def _document(npu: WheelInfo, torch: WheelInfo, regs: NpuRegistrations, tables: TorchTables, switch: bool) -> dict[str, Any]:
    aten = lambda name: f"aten::{name}"  # noqa: E731
    dropped = {aten(n): f"not an aten overload in torch {torch.version}" for n in regs.native if n not in tables.keys}
    dropped.update({aten(n): why for n, why in regs.skipped.items()})
    native = {aten(n): list(p) for n, p in regs.native.items() if n in tables.keys}
    groups: dict[str, list[str]] = {"implicit": [], "explicit": [], "cpu": [], "none": []}
    delegates: dict[str, str] = {}
    for name in tables.keys:
        if aten(name) in native:
            continue
        kind = tables.category(name)
        if kind == "delegate":
            delegates[aten(name)] = aten(tables.structured_delegate[name])
        else:
            groups[kind].append(aten(name))
    return {
        "schema": SCHEMA,
        "torch_npu": npu.version,
        "torch": torch.version.split("+")[0],
        "source": {
            "torch_npu_wheel": npu.path.name,
            "torch_npu_sha256": npu.sha256,
            "torch_npu_yaml": YAML_PATH,
            "torch_wheel": torch.path.name,
            "torch_sha256": torch.sha256,
            "torch_yaml": TORCH_YAML_PATH,
            "script": "scripts/sync_torch_npu_coverage.py",
            "script_version": SCRIPT_VERSION,
        },
        "fallback_error_env": FALLBACK_ENV.decode() if switch else None,
        "native": dict(sorted(native.items())),
        "native_composites": sorted(n for n in native if CIA in tables.keys[n.split("::", 1)[1]]),
        "autograd": sorted(aten(n) for n in regs.autograd if aten(n) in native),
        "quant": {aten(n): list(p) for n, p in sorted(regs.quant.items())},
        "sparse": {aten(n): list(p) for n, p in sorted(regs.sparse.items())},
        "dropped": dict(sorted(dropped.items())),
        "custom": {
            f"npu::{n}": {"schema": c.schema, "paths": list(c.paths), "exposed": c.exposed}
            for n, c in sorted(regs.custom.items())
        },
        "delegates": dict(sorted(delegates.items())),
        "torch_tables": {k: sorted(v) for k, v in groups.items()},
    }


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:]*$")
_HEADER = """\
# torch_npu {torch_npu} coverage, paired with torch {torch}. GENERATED: do not edit by hand.
# Regenerate: python scripts/sync_torch_npu_coverage.py {torch_npu}   (schema: docs/coverage.md)
"""


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text not in ("null", "true", "false", "yes", "no", "on", "off"):
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar


def _flow(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    return _scalar(value)


def render_document(doc: dict[str, Any]) -> str:
    """Block style at the top, one op per line below: a diff of two syncs reads op by op."""
    lines = [_HEADER.format(**doc).rstrip("\n")]
    for key, value in doc.items():
        if isinstance(value, dict) and key in ("source", "torch_tables"):
            lines.append(f"{key}:")
            for sub, item in value.items():
                if isinstance(item, list):
                    lines.append(f"  {sub}:" + (" []" if not item else ""))
                    lines.extend(f"  - {_scalar(v)}" for v in item)
                else:
                    lines.append(f"  {sub}: {_scalar(item)}")
        elif isinstance(value, dict):
            lines.append(f"{key}:" + (" {}" if not value else ""))
            lines.extend(f"  {_scalar(k)}: {_flow(v)}" for k, v in value.items())
        elif isinstance(value, list):
            lines.append(f"{key}:" + (" []" if not value else ""))
            lines.extend(f"- {_scalar(v)}" for v in value)
        else:
            lines.append(f"{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"
