"""The options every command spells the same way (docs/cli.md): --scenario, --top, --format / -o / --json-out /
--force, --wide, --chip, --from-chip, --torch-npu, --quiet / --debug, and the deprecated spellings kept for one
release. The valid chips and torch_npu releases are read from mappings/ when the options are built, so --help
lists what the data holds. Light on purpose: click and the mappings loaders only, no torch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, TypeVar

import click
from click.core import ParameterSource

from npuport.cost.roofline import default_baseline, default_chip, load_chips
from npuport.coverage import available_versions, default_version
from npuport.errors import NpuportError
from npuport.model.scenarios import DEFAULT_SET, DEFAULTS, GRAMMAR

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("text", "json", "markdown", "csv", "html")  # every --format lists its choices in this order
SCENARIO_METAVAR = GRAMMAR
SCENARIO_HELP = ("train (forward + backward), prefill or decode, each optionally sized: batch= sequences, seq= new "
                 "tokens per sequence, past= tokens already in the KV cache (e.g. decode:batch=4,past=8192); a name "
                 "alone takes that step's default size ({sizes}), shortened to fit the model's positions; mode=graph "
                 "times the step's eager kernels as one captured graph (CUDA graphs; NPUGraph / aclgraph on the NPU), "
                 "mode=compile as torch.compile's default mode (pointwise ops fused, each kernel launched from Python), "
                 "mode=reduce-overhead as torch.compile(mode=\"reduce-overhead\") (the compiled kernels replayed as "
                 "graphs), instead of eager op-by-op launches.")
TOP_HELP = "Rows shown in tables (0: all)."
REMOVED_IN = "0.2.0"  # the deprecated spellings below go in this release


def _apply(fn: F, opts: list[Callable[[Any], Any]]) -> F:
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def not_negative(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A click callback: a finite number, zero or more (a tolerance, where 0 asks for bit-exact; a budget; a size)."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"expected a finite number, 0 or more, received {value}")
    return value


def quiet_debug(fn: F) -> F:
    """--quiet and --debug, on every command."""
    return _apply(fn, [
        click.option("--quiet", is_flag=True, help="Nothing on stderr but an error: no progress, summary, notes or warnings."),
        click.option("--debug", is_flag=True, help="Show the traceback of an error."),
    ])


def scenario_option(default: str, multiple: bool = False, value: str | None = None) -> Callable[[F], F]:
    """--scenario NAME[:batch=N,seq=N,past=N], one grammar (npuport.model.scenarios.parse_scenario) for audit, bench
    and parity; `default` says the command's own default in words."""
    sizes = ", ".join(DEFAULTS[n].spec() for n in DEFAULT_SET)  # type: ignore[index]
    many = " Repeatable, or joined with + (train+decode)." if multiple else " One scenario."
    return click.option("--scenario", "scenarios" if multiple else "scenario", multiple=multiple, default=value,
                        metavar=SCENARIO_METAVAR, help=SCENARIO_HELP.format(sizes=sizes) + many + f" Default: {default}.")


def top_option(default: int) -> Callable[[F], F]:
    return click.option("--top", type=click.IntRange(min=0), default=default, show_default=True, metavar="N", help=TOP_HELP)


def report_options(formats: tuple[str, ...], json_out: bool = True) -> Callable[[F], F]:
    """--format, -o FILE, --json-out FILE, --force: where a report goes and in which format."""
    choices = tuple(f for f in FORMATS if f in formats)

    def deco(fn: F) -> F:
        opts = [
            click.option("--format", "fmt", type=click.Choice(choices), help="Output format (default: from -o's extension, else text)."),
            click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout."),
        ]
        if json_out:
            opts.append(click.option("--json-out", metavar="FILE", help="Also write the JSON report to FILE, whatever --format is."))
        opts.append(click.option("--force", is_flag=True, help="Allow -o" + (" / --json-out" if json_out else "") + " to replace an existing file."))
        return _apply(fn, opts)

    return deco


ATTN_CHOICES = ("auto", "sdpa", "eager")  # what a model traced on fake tensors can run (no flash-attn kernel can)
# a model run for real may also take transformers' kernel-backed implementations (on an NPU flash_attention_2 is
# torch_npu's npu_fusion_attention)
ATTN_CHOICES_REAL = (*ATTN_CHOICES, "flash_attention_2", "flash_attention_3", "flex_attention")


def attn_option(fn: F) -> F:
    """--attn for --hf builds traced on fake tensors (audit, bench), checked before anything is loaded."""
    return click.option("--attn", default="auto", show_default=True, type=click.Choice(ATTN_CHOICES),
                        help="Attention implementation for --hf builds: auto (SDPA where the class has it, else its "
                             "own default), sdpa, eager.")(fn)


def attn_option_real(fn: F) -> F:
    """--attn for --hf builds run for real (parity, profile record): transformers' other implementations too."""
    return click.option("--attn", default="auto", show_default=True, type=click.Choice(ATTN_CHOICES_REAL),
                        help="Attention implementation for --hf builds: auto (SDPA where the class has it, else its "
                             "own default), sdpa, eager, or a kernel-backed one transformers provides on the device "
                             "(flash_attention_2 is torch_npu's fused attention on an NPU).")(fn)


def wide_option(fn: F) -> F:
    return click.option("--wide", is_flag=True,
                        help="Text: every column of every table at its natural width (default: the columns that fit "
                             "the terminal; 120 columns, or $COLUMNS, when piped or written with -o).")(fn)


def chip_names(family: str | None = None) -> list[str]:
    return [n for n, c in load_chips().items() if family is None or c.family == family]


def chip_option(default: str | None, default_help: str | None = None) -> Callable[[F], F]:
    """--chip CHIP, listing the chips of mappings/hardware.yaml."""
    text = f"Target chip: {', '.join(chip_names())} (mappings/hardware.yaml)."
    text += f" Default: {default_help or default}."
    return click.option("--chip", default=default, metavar="CHIP", help=text)


def from_chip_option(fn: F) -> F:
    return click.option("--from-chip", "from_chip", default=default_baseline(), metavar="CHIP",
                        help=f"The CUDA chip the model comes from, for the step-time comparison: {', '.join(chip_names('cuda'))}. "
                             f"Default: {default_baseline()} (mappings/hardware.yaml default_baseline).")(fn)


def torch_npu_option(dest: str = "torch_npu") -> Callable[[F], F]:
    """--torch-npu VERSION, listing the releases checked in under mappings/coverage/."""
    return click.option("--torch-npu", dest, default=None, metavar="VERSION",
                        help=f"torch_npu release: {available_versions()[0]} to {default_version()}, "
                             f"{len(available_versions())} with data (mappings/coverage/, `npuport coverage list`); "
                             "another version string resolves to the nearest earlier release, with a note. "
                             f"Default: the newest, {default_version()}.")


DEFAULT_CHIP = default_chip()  # mappings/hardware.yaml default_target


class DeprecatedOption(click.Option):
    """An old spelling kept for one release: hidden from --help; when given, a note on stderr and its value moved to
    the option that replaced it (`into`, through `convert`), before the command runs (apply_deprecations)."""

    def __init__(self, *args: Any, use: str, into: str, convert: Callable[[Any], Any] | None = None,
                 note: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("hidden", True)
        super().__init__(*args, **kwargs)
        self.use = use
        self.into = into
        self.convert = convert
        self.note = note

    @property
    def spelling(self) -> str:
        return "/".join(self.opts)


def deprecated(*decls: str, use: str, into: str, convert: Callable[[Any], Any] | None = None, note: str = "",
               **kwargs: Any) -> Callable[[F], F]:
    return click.option(*decls, cls=DeprecatedOption, use=use, into=into, convert=convert, note=note, **kwargs)


def apply_deprecations(ctx: click.Context, debug: bool = False) -> None:
    """Move each deprecated spelling given on the command line to its new option, with a note on stderr (none with
    --quiet); both spellings at once is an error."""
    for p in ctx.command.params:
        if not isinstance(p, DeprecatedOption) or p.name is None:
            continue
        value = ctx.params.pop(p.name, None)
        if ctx.get_parameter_source(p.name) is not ParameterSource.COMMANDLINE:
            continue
        if ctx.get_parameter_source(p.into) is ParameterSource.COMMANDLINE:
            # the new option as the user spelled it: `--json --format text` names --format text, not --format json
            given = f"{p.use.split()[0]} {ctx.params.get(p.into)}" if " " in p.use else p.use
            raise NpuportError(f"both {p.spelling} and {given} given", f"{p.use} alone ({p.spelling} is its deprecated spelling)",
                               f"{p.spelling} and {given}")
        ctx.params[p.into] = p.convert(value) if p.convert else value
        if not ctx.params.get("quiet"):
            click.echo(f"npuport: {p.spelling} is deprecated, use {p.use}" + (f" ({p.note})" if p.note else ""), err=True)
