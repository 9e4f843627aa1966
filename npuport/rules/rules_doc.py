"""Render docs/rules.md from the shipped rules: `python -m npuport.rules.rules_doc > docs/rules.md`.

The page is generated so it never drifts from npuport/mappings/behaviours.yaml; tests/rules/test_rules_doc.py checks it.
"""

from __future__ import annotations

from npuport.cost.roofline import npu_chips
from npuport.rules.catalog import Rule, load_rules

_INTRO = """# Behaviour rules and source diagnostics

npuport points at code that runs on Ascend NPU but computes something else, crawls or crashes compared with
CUDA. Two families of stable ids:

- **NPB** behaviour rules (`npuport/mappings/behaviours.yaml`), evaluated over the ops a model really runs (the audit's
  fake-tensor traces), never over text alone (a rule may also ask that the files the traced calls came from use an
  API, as the static scan finds it: `source_uses`). Each finding carries evidence: op, module path, source line,
  call count and time share per scenario.
- **NPS** source diagnostics (`mappings/source_apis.yaml`), from an AST scan of `model.py` and the local modules
  it imports (`npuport audit --static-only` runs only this). One page per id in [diagnostics/](diagnostics/).

Python: `npuport.rules.evaluate(traces, chip=, torch_npu=, time_share=, reproducibility=)`,
`npuport.scan.source_scan.scan(path)`, `npuport.rules.suppress(items, patterns)`,
`npuport.rules.fail_on(items, level)`; `npuport migrate model.py [--write]` applies the mechanical part.

## CI use

- Suppress by id, range or wildcard: `NPB016`, `NPS010-NPS019`, `NPB0*` (case-insensitive; a malformed pattern
  is a usage error, exit 2).
- `--fail-on error|warning|info`: exit 1 when any finding or diagnostic left after suppression is at that level
  or above.

## Detection

- **trace**: the condition is proven from the recorded calls (dtypes, argument values, shapes, dataflow between
  calls, scenarios).
- **presence**: the op's presence flags a risk whose outcome depends on things a trace cannot see (environment
  variables, runtime options, tensor values). These rules are `info` unless the chip makes them certain. One that
  is about a setting made in code fires only where the code makes it: NPB062 (SDPA backend flags) needs an NPS022
  reference (`sdpa_kernel`, `torch.backends.cuda.enable_*_sdp`, `sdp_kernel`) in a file the traced calls came from
  (predicate `source_uses`, `npuport/rules/predicates.py`); a flag set only in a file that issues no traced op
  (a training script) is reported by the static scan's NPS022 alone.

`--chip` changes verdicts: a rule applies only to the chips it lists (default all NPU chips), and `levels:`
raises or lowers its level per chip. Rules marked *repro* fire only in a reproducibility run
(`reproducibility=True`). Rules that need the coverage data (NPB040, NPB041) stay silent when
`npuport.coverage` is not available.

## Schema (npuport/mappings/behaviours.yaml)

| field | meaning |
|---|---|
| `id` | `NPB` + three digits, stable; never reused |
| `title`, `explanation`, `fix`, `source`, `fact` | what, why, what to do, where the fact comes from, its key in facts/npu-behaviours.md |
| `impact` | `numerics` / `performance` / `crash` |
| `level` | `error` / `warning` / `info`; `levels: {chip: level}` overrides per chip |
| `detection` | `trace` / `presence` (above) |
| `chips` | chips the rule applies to (names from mappings/hardware.yaml) |
| `torch_npu` | version range such as `">=2.1,<2.6"`; unset = every release (facts were read from torch-npu 2.14.0) |
| `reproducibility` | only in reproducibility runs |
| `scope` | `sites` (each call / composite frame, default) or `traces` (one predicate over all scenarios) |
| `match.ops`, `match.exclude_ops` | `sort` matches any namespace and overload; `npu::x`, `aten::to.dtype_layout` match exactly |
| `match.apis`, `match.exclude_apis` | the torch-level API that issued the call (`*` wildcards) |
| `match.exclude_frames` | skip calls issued inside these composite ops (their CPU decomposition) |
| `match.module_types`, `match.phases` | owning module class; `forward` / `backward` |
| `match.dtypes`, `match.self_dtypes` | any tensor / the first tensor input has one of these dtypes |
| `match.where` | `[{arg: NAME, eq: V}]` (also `ne in not_in gt ge lt le is_set`; args by schema name, with schema defaults), `output_numel`, `input_rank: POS` |
| `match.predicate` | a named Python predicate (`npuport/rules/predicates.py`; `source_uses`: `{name: source_uses, diagnostics: [NPS id, ...]}`), `name` or `{name: ..., params}` |

Loading rejects unknown fields, unknown chips, unknown predicates or predicate parameters, bad comparators and
bad version ranges, naming the file, the rule and the field.

## Source APIs (mappings/source_apis.yaml)

`diagnostics` (id -> title, level, auto, migrate, npu, fix, source), `npu_names` (torch.cuda names that exist
unchanged in torch.npu, from torch_npu/npu/__init__.py), `groups` (torch.cuda names with their own id),
`renamed`, `no_equivalent`, `torch_apis` (dotted prefixes such as torch.backends.cudnn), `imports`
(third-party modules), `env_vars`. `auto` says whether `torch_npu.contrib.transfer_to_npu` handles the
reference at run time; `migrate` whether `npuport migrate` rewrites it.
"""


def _chips(rule: Rule) -> str:
    if set(rule.chips) == set(npu_chips()) and not rule.levels:
        return "all"
    text = ", ".join(c.removeprefix("Ascend") for c in rule.chips)
    if rule.levels:
        text += " (" + ", ".join(f"{c.removeprefix('Ascend')}: {lvl}" for c, lvl in rule.levels.items()) + ")"
    return text


def render_markdown(rules: list[Rule] | None = None) -> str:
    rules = rules if rules is not None else load_rules()
    trace = [r for r in rules if r.detection == "trace"]
    presence = [r for r in rules if r.detection == "presence"]
    out = [_INTRO, f"## Rules ({len(rules)}: {len(trace)} trace-detected, {len(presence)} presence-only)\n",
           "| id | title | impact | level | detection | chips | repro |", "|---|---|---|---|---|---|---|"]
    for r in rules:
        out.append(f"| {r.id} | {r.title} | {r.impact} | {r.level} | {r.detection} | {_chips(r)} | {'yes' if r.reproducibility else ''} |")
    out.append("\n## Rule details\n")
    for r in rules:
        out.append(f"### {r.id}: {r.title}\n")
        out.append(f"{r.explanation}\n")
        out.append(f"- **Fix:** {r.fix}")
        out.append(f"- **Source:** {r.source} (facts: `{r.fact}`)\n")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_markdown(), end="")
