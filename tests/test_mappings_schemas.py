"""Every mappings file is checked against its JSON Schema at load: the shipped files pass, and a broken copy
(selected through NPUPORT_MAPPINGS) fails with a MappingError that names the file, the entry and the field."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest
import yaml

from npuport import mappings
from npuport.cost import roofline
from npuport.errors import MappingError
from npuport.parity import tolerances
from npuport.scan import source_apis

SHIPPED = Path(mappings.__file__).resolve().parent
FILES = sorted(str(p.relative_to(SHIPPED)) for p in [*SHIPPED.glob("*.yaml"), *SHIPPED.glob("coverage/*.yaml")])


def test_every_shipped_file_has_a_schema_and_validates() -> None:
    assert "hardware.yaml" in FILES and "coverage/host_link.yaml" in FILES
    used = set()
    for name in FILES:
        schema = mappings.schema_path(name)
        assert schema.is_file(), name
        used.add(schema.name)
        mappings.check_document(mappings.load_yaml(name), name)  # raises on a violation
    assert used == {p.name for p in mappings.SCHEMAS.glob("*.json")}, "a schema file no mappings file uses"


@pytest.mark.parametrize("schema", sorted(p.name for p in (SHIPPED / "schemas").glob("*.json")))
def test_schemas_are_valid_draft_2020_12(schema: str) -> None:
    doc = json.loads((SHIPPED / "schemas" / schema).read_text())
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc.get("description"), "say what the file holds and who reads it"


@pytest.fixture
def broken_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, Callable[[Any], None]], None]:
    """Copy the shipped mappings/ to a tmp dir, select it through NPUPORT_MAPPINGS, and let a test break one file."""
    caches = (roofline.load_chips, tolerances._load, source_apis.load_source_apis)
    for cached in caches:
        cached.cache_clear()
    root = tmp_path / "mappings"
    shutil.copytree(SHIPPED, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))

    def breaker(name: str, mutate: Callable[[Any], None]) -> None:
        doc = copy.deepcopy(mappings.load_yaml(name))
        mutate(doc)
        (root / name).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")

    yield breaker
    for cached in caches:
        cached.cache_clear()


def _set(path: str, value: Any) -> Callable[[Any], None]:
    """'chips.H200.vendor' = value (list indices as numbers)."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def mutate(doc: Any) -> None:
        for p in parents:
            doc = doc[p]
        doc[last] = value

    return mutate


def _drop(path: str) -> Callable[[Any], None]:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def mutate(doc: Any) -> None:
        for p in parents:
            doc = doc[p]
        del doc[last]

    return mutate


CASES = [
    # file, mutation, entry, field, problem
    ("hardware.yaml", _set("chips.H200.vendr", "nvidia"), "chips.H200", "vendr", "unknown field"),
    ("hardware.yaml", _drop("chips.Ascend910A.source"), "chips.Ascend910A", "source", "missing required field"),
    ("hardware.yaml", _set("default_target.chip", 910), "default_target", "chip", "expected string, got integer"),
    ("behaviours.yaml", _set("rules.2.levle", "error"), "NPB003", "levle", "unknown field"),
    ("behaviours.yaml", _drop("rules.2.fix"), "NPB003", "fix", "missing required field"),
    ("behaviours.yaml", _set("rules.2.reproducibility", "yes"), "NPB003", "reproducibility", "expected boolean, got string"),
    ("behaviours.yaml", _drop("rules.2.id"), "rules[2]", "id", "missing required field"),
    ("behaviours.yaml", _set("rules.0.match.where.0.approx", 1), "NPB001", "match.where[0].approx", "unknown field"),
    ("tolerances.yaml", _set("dtypes.float16.rtol", "1e-3"), "dtypes.float16", "rtol", "expected number, got string"),
    ("tolerances.yaml", _drop("dtypes.bfloat16"), "dtypes", "bfloat16", "missing required field"),
    ("source_apis.yaml", _set("diagnostics.NPS001.auto", "yes"), "diagnostics.NPS001", "auto", "expected boolean"),
    ("source_apis.yaml", _set("diagnostics.NPS1", {}), "diagnostics", "NPS1", "does not match"),
    ("fusions.yaml", _set("patterns.0.steps.1.dir", "sideways"), "layer_norm_decomposed", "steps[1].dir", "expected one of up"),
    ("fusions.yaml", _set("replacements.npu_rms_norm.constraints.head_dim_maxx", 64),
     "replacements.npu_rms_norm.constraints", "head_dim_maxx", "unknown field"),
    ("kernel_expectations.yaml", _drop("expectations.0.paths.0.verdict"), "cuda-attention-fused", "paths[0].verdict",
     "missing required field"),
    ("kernel_classes.yaml", _set("classes.0.devices", ["gpu"]), "classes[0].devices", "[0]", "expected one of"),
    ("kernel_classes.yaml", _drop("classes.1.source"), "classes[1]", "source", "missing required field"),
    ("op_classes.yaml", _set("classes.hot_cumulative_share", "0.7"), "classes", "hot_cumulative_share", "expected number"),
    ("op_classes.yaml", _set("predicate_ops.allocators.opz", []), "predicate_ops.allocators", "opz", "unknown field"),
    ("routes.yaml", _drop("routes.eager.why"), "routes.eager", "why", "missing required field"),
    ("kernels.yaml", _set("kernels.flash_attention.max_head_dim", "256"), "kernels.flash_attention", "max_head_dim",
     "expected integer, got string"),
    ("kernels.yaml", _set("tolerances.norm.float16.rtl", 0.1), "tolerances.norm.float16", "rtl", "unknown field"),
    ("coverage/host_link.yaml", _set("links.pcie4_x16.bytes_per_s", "fast"), "links.pcie4_x16", "bytes_per_s", "expected number"),
    ("coverage/torch_npu-2.14.0.yaml", _set("source.script_version", "1"), "source", "script_version", "expected integer"),
    ("coverage/torch_npu-2.14.0.yaml", _set("extra", 1), "<top>", "extra", "unknown field"),
]


@pytest.mark.parametrize("name, mutate, entry, field, problem", CASES, ids=[f"{c[0]}:{c[2]}:{c[3]}" for c in CASES])
def test_broken_copy_names_file_entry_and_field(broken_copy, name: str, mutate, entry: str, field: str, problem: str) -> None:  # noqa: ANN001
    broken_copy(name, mutate)
    with pytest.raises(MappingError) as info:
        mappings.load_checked(name)
    text = str(info.value)
    assert text.startswith(f"{name}: entry {entry!r}, field {field!r}: "), text
    assert problem in text, text


def test_the_loaders_validate(broken_copy) -> None:  # noqa: ANN001
    """The modules' own loaders go through the schema (not only load_checked called directly)."""
    broken_copy("hardware.yaml", _set("chips.H200.memory_bandwidth", "fast"))
    broken_copy("tolerances.yaml", _set("dtypes.float32.cosine", None))
    broken_copy("source_apis.yaml", _set("diagnostics.NPS002.level", "loud"))
    for load, needle in ((roofline.load_chips, "hardware.yaml: entry 'chips.H200', field 'memory_bandwidth'"),
                         (tolerances.load_tolerances, "tolerances.yaml: entry 'dtypes.float32', field 'cosine'"),
                         (source_apis.load_source_apis, "source_apis.yaml: entry 'diagnostics.NPS002', field 'level'")):
        with pytest.raises(MappingError, match=needle.replace(".", r"\.")):
            load()


def test_cross_references_stay_in_code(broken_copy) -> None:  # noqa: ANN001
    """What a schema cannot say: the default target must be a chip in the file."""
    broken_copy("hardware.yaml", _set("default_target.chip", "Ascend999"))
    with pytest.raises(MappingError, match="entry 'default_target', field 'chip': 'Ascend999' is not under chips"):
        roofline.load_chips()
