"""`npuport audit`: its options and help, the checks that need no model, and the first progress line; the audit
itself runs in npuport.cli.audit_impl, imported (with torch) only after that line is out."""

from __future__ import annotations

from typing import Any

import click

from npuport.cli.common import check_new, handle_errors, say
from npuport.cli.lazy import Command
from npuport.cli.options import (
    DEFAULT_CHIP,
    attn_option,
    chip_option,
    from_chip_option,
    quiet_debug,
    report_options,
    scenario_option,
    top_option,
    torch_npu_option,
    wide_option,
)
from npuport.cost.host_probe import parse_host_probe
from npuport.cost.memory import default_optimizer, optimizer_names
from npuport.cost.roofline import get_baseline_chip, get_chip
from npuport.coverage.database import resolve_version
from npuport.errors import NpuportError
from npuport.model.job import check_dtype_name, check_training, job
from npuport.model.scenarios import parse_scenarios

FORMATS = ("text", "json", "markdown", "csv", "html")


@click.command("audit", cls=Command, impl="npuport.cli.audit_impl:audit")
@click.argument("model", required=False)
@click.option("--hf", "hf_config", metavar="CONFIG.json", help="Build a Hugging Face architecture from its config.json (no weights, no download).")
@click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model (or MODEL as file.py:function).")
@scenario_option("train, prefill and decode", multiple=True)
@chip_option(DEFAULT_CHIP, f"{DEFAULT_CHIP} (mappings/hardware.yaml default_target)")
@from_chip_option
@torch_npu_option()
@click.option("--dtype", help="Trace in this dtype (float32, float16, bfloat16). Default: the config's, else bfloat16 for --hf; as built for a model file.")
@attn_option
@click.option("--hf-part", "hf_part", type=click.Choice(["text", "full"]), default="text", show_default=True, help="For a composite (multimodal) config: its text decoder, or the full model.")
@report_options(FORMATS)
@top_option(30)
@wide_option
@click.option("--show-views", is_flag=True, help="Also list view / metadata ops in the text table.")
@click.option("--preset", default="default", show_default=True, help="Route-scoring preset: default, fast-poc, long-term-training.")
@click.option("--weights", metavar="DIM=W,...", help="Override route-scoring weights, e.g. performance=0.5,dev_time=0.1.")
@click.option("--static-only", is_flag=True, help="Only scan the source for CUDA-specific APIs (AST, nothing executed; text or json).")
@click.option("--suppress", "suppressions", multiple=True, metavar="ID[-ID]|PATTERN", help="Hide findings by id, range or wildcard (NPB001, NPS010-NPS019, NPB0*). Repeatable.")
@click.option("--fail-on", "fail_on_level", type=click.Choice(["error", "warning", "info"]), help="Exit 1 when a finding at this level or above remains.")
@click.option("--no-reuse", "no_reuse", is_flag=True, help="Record every decoder layer op by op instead of recording one of "
              "each set of identical layers and copying its records (slower; the inventory is the same).")
@click.option("--reproducibility", is_flag=True, help="Flag nondeterministic ops (for runs that must reproduce bit for bit).")
@click.option("--optimizer", type=click.Choice(optimizer_names()), default=default_optimizer(), show_default=True,
              help="Optimizer of the training step, for its memory (mappings/memory.yaml).")
@click.option("--master-weights", is_flag=True, help="Mixed precision: count a float32 copy of the weights and float32 optimizer states.")
@click.option("--profile", "profiles", metavar="ART.json", type=click.Path(dir_okay=False), multiple=True,
              help="Join a measured profile (from `npuport profile record` or `import`) to the estimate: measured time "
                   "and share per op and module. Repeatable (one per scenario).")
@click.option("--profile-scenario", metavar="NAME", help="The scenario the profiles measured (default: the one a recorded "
                                                          "profile names, else prefill, else the first audited).")
@click.option("--world-size", "world_size", type=int, metavar="N",
              help="Trace one rank of an N-rank job under torch's fake process group: the model file's "
                   "parallelize(model, device_type) shards it (FSDP2, tensor parallel, DTensor) and every collective "
                   "it issues is recorded (docs/scale-out.md).")
@click.option("--rank", "rank", type=int, default=0, show_default=True, help="The rank traced (with --world-size or --parallel).")
@click.option("--host-probe", "host_probe", metavar="TIME",
              help="This host's speed, as `npuport profile probe` measures it (time per tiny eager op: 9.3us): every "
                   "chip's host costs are scaled to it (they were fit on a host reading 17us), the NPU server's host "
                   "taken as fast as this one. An eager step's host side follows the host.")
@click.option("--parallel", "parallel", metavar="tp=N,dp=N,zero=N,ep=N,pp=N",
              help="Apply a standard layout instead of the model's own: tensor parallel by transformers' plan, ZeRO / "
                   "FSDP2 per decoder layer (traced); DDP, expert and pipeline parallel communication estimated.")
@quiet_debug
@handle_errors
def audit(model: str | None, hf_config: str | None, scenarios: tuple[str, ...], chip: str, from_chip: str,
          torch_npu: str | None, output: str | None, json_out: str | None, force: bool, static_only: bool, quiet: bool,
          **_: Any) -> None:
    """Inventory every op MODEL runs, on fake tensors: module, source line, shapes per scenario, dtypes, FLOPs,
    bytes, roofline time share on the target chip against the CUDA chip it comes from, coverage on torch_npu,
    behaviour differences, CUDA-only source and fusion advice.

    MODEL is a model.py defining build_model() and example_inputs(scenario) (see docs/model-files.md), or give
    --hf CONFIG.json.

    \b
    Examples:
      npuport audit examples/gpt/model.py
      npuport audit --hf examples/configs/llama-2-7b.json --scenario decode:batch=8,past=4096 --chip Ascend910B
      npuport audit model.py --format html -o report.html --json-out report.json
      npuport audit train.py --static-only --fail-on warning      # CUDA-only source, nothing executed
    """
    if (model is None) == (hf_config is None):
        raise NpuportError("give exactly one model", "MODEL (a model.py) or --hf CONFIG.json", f"MODEL={model!r}, --hf={hf_config!r}")
    if _.get("profile_scenario") and not _.get("profiles"):
        raise NpuportError("--profile-scenario names the scenario a --profile measured", "--profile ART.json with it",
                           f"--profile-scenario {_.get('profile_scenario')} alone")
    # fail before the (long) audit, not after it
    check_new([output, json_out], force, inputs=[model, hf_config, *_.get("profiles", ())])
    if static_only:
        if model is None:
            raise NpuportError("--static-only scans source files", "a model.py (not --hf)", f"--hf {hf_config}")
        # what times, shards or joins a traced step has nothing to act on when nothing runs: said, not ignored
        traced = [f"--scenario {scenarios[0]}" if scenarios else "", "--profile" if _.get("profiles") else "",
                  f"--parallel {_['parallel']!r}" if _.get("parallel") is not None else "",
                  f"--world-size {_['world_size']}" if _.get("world_size") is not None else "",
                  f"--rank {_['rank']}" if _.get("rank") else "", "--master-weights" if _.get("master_weights") else "",
                  f"--dtype {_['dtype']}" if _.get("dtype") else "",
                  f"--host-probe {_['host_probe']}" if _.get("host_probe") else ""]
        if any(traced):
            raise NpuportError("--static-only traces nothing: no step to size, shard or join a profile to",
                               "--static-only without --scenario, --profile, --parallel, --world-size, --rank, "
                               "--dtype, --master-weights and --host-probe", ", ".join(t for t in traced if t))
        say(quiet, f"scanning {model.split(':')[0]} (source only, nothing executed)")
        return
    get_chip(chip)  # what needs no model is checked before anything loads (api.check_audit_options, torch-free)
    get_baseline_chip(from_chip)
    if torch_npu is not None:
        resolve_version(torch_npu)  # any release string resolves to its data or the nearest earlier; else exit 2
    parsed = parse_scenarios(list(scenarios))
    check_dtype_name(_.get("dtype"))
    job(_.get("parallel"), _.get("world_size"), _.get("rank") or 0)
    check_training(parsed, given_optimizer(_.get("optimizer")), bool(_.get("master_weights")), _.get("dtype"))
    if _.get("host_probe") is not None:
        parse_host_probe(_["host_probe"])
    say(quiet, f"loading {model or hf_config}")


def given_optimizer(value: str | None) -> str | None:
    """--optimizer as typed, None when it took its default (npuport.model.job.check_training refuses an optimizer
    given for a run with no training step, not the default one)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.get_parameter_source("optimizer") in (None, click.core.ParameterSource.DEFAULT):
        return None if ctx is not None else value
    return value
