"""`npuport profile import`: a measured torch.profiler / Kineto trace into npuport's compact profile artifact
(docs/profile.md). Declares the options and help; the work (npuport.api.profile_import) is in
npuport.cli.profile_impl, imported only when a subcommand runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from npuport.cli.common import check_absent, check_new, check_out_dir, handle_errors
from npuport.cli.lazy import Command, Group
from npuport.cli.options import attn_option_real, quiet_debug, report_options, scenario_option, top_option, wide_option
from npuport.errors import NpuportError
from npuport.model.scenarios import parse_scenarios


@click.group("profile", cls=Group)
def profile() -> None:
    """Measured profiles next to the estimate: record a run (or import a trace you have), join it to the audit with
    `npuport audit ... --profile ART.json`, compare a baseline with a new run.

    \b
    Examples:
      npuport profile record --hf examples/configs/tinyllama-1.1b.json --dev cuda --scenario decode:past=2048 --out-dir prof
      npuport profile import trace.json.gz -o gpt.profile.json
      npuport audit examples/gpt/model.py --scenario prefill:batch=1,seq=64 --profile gpt.profile.json
      npuport profile compare cuda.profile.json npu.profile.json
    """


@profile.command("record", cls=Command, impl="npuport.cli.profile_impl:record")
@click.argument("model", required=False)
@click.option("--hf", "hf_config", metavar="CONFIG.json", help="A Hugging Face architecture from its config.json (random weights, built on the device).")
@click.option("--entry", metavar="FUNCTION", help="Builder function in MODEL instead of build_model.")
@scenario_option("prefill", multiple=True)
@click.option("--dev", default="cpu", show_default=True, metavar="cpu|cuda[:i]|npu[:i]|auto", help="Where the model runs.")
@click.option("--dtype", help="Model dtype (float32, float16, bfloat16). Default: the config's, else float32.")
@attn_option_real
@click.option("--warmup", type=click.IntRange(min=1), default=2, show_default=True,
              help="Steps run before the profiled ones (at least 1: without a warm-up step the profiler loses the first "
                   "profiled one).")
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True, help="Profiled steps per scenario.")
@click.option("--timed-steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Steps timed afterwards without the profiler; their median is the measured step.")
@click.option("--decode-cache", type=click.Choice(["fixed", "grow"]), default="fixed", show_default=True,
              help="fixed: the decode cache is given back its past tokens after each step (every step the audit's "
                   "shapes); grow: it grows a token per step, as in generation.")
@click.option("--out-dir", required=True, metavar="DIR", help="Write NAME.trace.json.gz (raw; on an NPU the Ascend profiler's NAME_ascend_pt folder) and NAME.profile.json (artifact) per scenario here.")
@click.option("--force", is_flag=True, help="Allow replacing files already in --out-dir.")
@quiet_debug
@handle_errors
def record(model: str | None, hf_config: str | None, out_dir: str, force: bool, scenarios: tuple[str, ...], dev: str,
           **_: Any) -> None:
    """Run MODEL (or --hf CONFIG.json) for real on --dev under torch.profiler (on an NPU, torch_npu.profiler, its
    export read as `profile import` reads it): per scenario warm-up steps, then profiled steps; every kernel mapped
    to the aten op and the module that launched it; per step the wall, host, kernel and idle time. Train is forward + backward (as the audit counts it), decode one token against a cache of
    `past` tokens.

    \b
    Examples:
      npuport profile record examples/gpt/model.py --scenario prefill:batch=1,seq=64 --out-dir prof
      npuport profile record --hf examples/configs/llama-2-7b.json --dtype bfloat16 --dev cuda \\
          --scenario train:batch=1,seq=2048 --scenario decode:batch=1,past=2048 --out-dir llama7b
      npuport audit --hf examples/configs/llama-2-7b.json --chip H200 --scenario decode:batch=1,past=2048 \\
          --profile llama7b/decode.profile.json
    """
    if (model is None) == (hf_config is None):
        raise NpuportError("give exactly one model", "MODEL (a model.py) or --hf CONFIG.json",
                           f"MODEL={model!r}, --hf={hf_config!r}")
    check_out_dir(out_dir, "--out-dir")
    names = [s.name for s in parse_scenarios(list(scenarios or ("prefill",)))]  # "prefill+decode" is two
    raw = "_ascend_pt" if dev.split(":", 1)[0] == "npu" else ".trace.json.gz"  # the raw trace this device writes
    check_absent([str(Path(out_dir) / f"{n}{ext}") for n in names for ext in (".profile.json", raw)], force,
                 inputs=[model, hf_config])


@profile.command("probe", cls=Command, impl="npuport.cli.profile_impl:probe")
@click.option("--dev", default="auto", show_default=True, metavar="cpu|cuda[:i]|npu[:i]|auto",
              help="The device whose eager dispatch is probed (auto: cuda, else npu, else cpu).")
@click.option("--rounds", type=click.IntRange(min=1), default=20, show_default=True,
              help="Probes taken (300 tiny adds each, as `profile record` probes around each timed step); the median is printed.")
@quiet_debug
@handle_errors
def probe(**_: Any) -> None:
    """This host's speed: seconds per tiny eager op on the device (the probe `profile record` takes around each timed
    step). An eager step's host side scales with it; give it to `npuport audit --host-probe` so the CUDA chips' step
    times are estimated for this host instead of the one the host costs were fit on.

    \b
    Examples:
      npuport profile probe --dev cuda
      npuport audit --hf examples/configs/llama-2-7b.json --host-probe 9.3us
    """


@profile.command("import", cls=Command, impl="npuport.cli.profile_impl:import_trace")
@click.argument("trace", type=click.Path())
@click.option("-o", "--output", metavar="FILE", required=True, help="Write the profile artifact (JSON) to FILE.")
@click.option("--force", is_flag=True, help="Allow -o to replace an existing file.")
@quiet_debug
@handle_errors
def import_trace(output: str, force: bool, **_: Any) -> None:
    """Read TRACE and write per aten op its calls, host (self CPU) time, device kernel time and share, the kernels
    that ran, per module where the trace says, and per ProfilerStep the wall, host, kernel and idle time. TRACE is a
    torch.profiler / Kineto Chrome trace (.json or .json.gz, streamed), an Ascend PyTorch profiler output folder
    (`*_ascend_pt`, one rank: its trace_view.json, else kernel_details.csv), or an Nsight Systems SQLite export
    (`nsys export --type sqlite`; op names from `torch.autograd.profiler.emit_nvtx` ranges). A trace without
    kernels (a CPU run) uses CPU op time as its device time, marked device "cpu".

    \b
    Examples:
      npuport profile import trace.json.gz -o gpt.profile.json
      npuport profile import run/trace.json -o run.profile.json --force
      npuport profile import prof/host_123_ascend_pt -o npu.profile.json
      npuport profile import run.sqlite -o nsys.profile.json
    """
    check_new([output], force, inputs=[_.get("trace")])


@profile.command("compare", cls=Command, impl="npuport.cli.profile_impl:compare")
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--audit", "audit_json", metavar="AUDIT.json", type=click.Path(dir_okay=False),
              help="The audit JSON of the model (`npuport audit --json-out`): each row names the fused op it expected.")
@report_options(("text", "json", "markdown", "csv", "html"))
@top_option(25)
@wide_option
@quiet_debug
@handle_errors
def compare(output: str | None, json_out: str | None, force: bool, **_: Any) -> None:
    """BASE and NEW side by side: each a profile artifact (`profile record` / `profile import`) or anything `profile
    import` reads (a Kineto trace, an Ascend profiler folder, an Nsight SQLite export). Per step: wall, compute,
    communication, memory and host / idle time; per aten op and module (where both profiles name modules) the time
    per step on each side, worst regressions first, with the kernels that ran on each side.

    \b
    Examples:
      npuport profile compare cuda/decode.profile.json npu/decode.profile.json
      npuport profile compare run1.profile.json run2.profile.json --format markdown -o diff.md
      npuport profile compare cuda.profile.json host_1_ascend_pt --audit audit.json --top 40
    """
    check_new([output, json_out], force, inputs=[_.get("base"), _.get("new"), _.get("audit_json")])
