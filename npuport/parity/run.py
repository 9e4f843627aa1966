"""The parity pipelines behind the commands: record one side to an artifact (recording.py); compare any two sides.

A side is either a device spec (run here, now) or an artifact directory (recorded elsewhere, on one device or per
rank under torchrun). Settings that make entries comparable (scenario, seed, dtype, capture options) come from the
first artifact when there is one. Per-rank records of one world size and layout are compared rank by rank
(rankwise.py); any other mix is gathered into global tensors first (gather.py). Under torchrun, compare runs the
device side on every rank into a per-rank record beside the reference, then compares the two records.
"""

from __future__ import annotations

import contextvars
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from npuport.devices.device import Device, NumericsPolicy, parse_device, preserved_numerics
from npuport.errors import NpuportError
from npuport.parity.artifact import MANIFEST, Artifact, check_record, step_spec
from npuport.parity.compare import Comparison, compare
from npuport.parity.entries import Capture, CaptureOptions
from npuport.parity.identity import check_same_records
from npuport.parity.localize import FirstDivergence, first_divergence, replay
from npuport.parity.procgroup import process_group, rank_device, torchrun_env
from npuport.parity.ranked import RankedArtifact, load_side, write_ranked
from npuport.parity.rankwise import RankView, compare_ranks, same_layout
from npuport.parity.recording import Progress, check_keep, device_json, rank_progress, record, record_one, say
from npuport.parity.session import LiveSide, RunOptions, Target, inputs_from_artifact, prepare, run_side
from npuport.parity.tolerances import Tolerances, load_tolerances

__all__ = ["ParityResult", "SideInfo", "is_artifact_path", "record", "run_parity"]


@dataclass
class SideInfo:
    role: str
    label: str
    source: str  # live | artifact
    info: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "label": self.label, "source": self.source, **self.info}


@dataclass
class ParityResult:
    comparison: Comparison
    first: FirstDivergence | None
    sides: list[SideInfo]
    tolerances: Tolerances
    scenario: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    ranks: RankView | None = None  # per-rank records: compared rank by rank (comparison = the worst rank's) or gathered

    def __bool__(self) -> bool:
        return bool(self.comparison)

    @property
    def verdict_line(self) -> str:
        text = str(self.comparison)
        if self.ranks is not None:
            text += self.ranks.suffix(bool(self))
        if self.first is not None and not self:
            text += f"; {self.first}"
        return text


_DEVICE_NAME = re.compile(r"^(cpu|cpu64|cuda(:\d+)?|npu(:\d+)?)$")


def is_artifact_path(text: str) -> bool:
    """A record folder, or a device. A device name (npu, cuda:1) stays a device beside a folder of that name, unless
    that folder is a record (it has a manifest)."""
    if _DEVICE_NAME.match(text) and not (Path(text) / MANIFEST).is_file():
        return False
    return Path(text).exists() or "/" in text or text.startswith(".")


def run_parity(ref: str, dev: str, target: Target | None, opts: RunOptions, golden: str | None = None,
               tolerances: Tolerances | None = None, localize: bool = True, allow_unmatched: bool = False,
               progress: Progress = None) -> ParityResult:
    """Compare `dev` against `ref` (each a device spec or an artifact directory), optionally with a golden."""
    with preserved_numerics():
        return _run_parity(ref, dev, target, opts, golden, tolerances, localize, allow_unmatched, progress)


def _run_parity(ref: str, dev: str, target: Target | None, opts: RunOptions, golden: str | None,
                tolerances: Tolerances | None, localize: bool, allow_unmatched: bool, progress: Progress) -> ParityResult:
    if torchrun_env() is not None:
        return _under_torchrun(ref, dev, target, opts, golden, tolerances, allow_unmatched, progress)
    return _compare_sides(ref, dev, target, opts, golden, tolerances, localize, allow_unmatched, progress)


def _under_torchrun(ref: str, dev: str, target: Target | None, opts: RunOptions, golden: str | None,
                    tolerances: Tolerances | None, allow_unmatched: bool, progress: Progress) -> ParityResult:
    """Every rank runs MODEL on --dev into its part of a per-rank record (hidden, beside --ref, removed at the end),
    with the reference's inputs and weights regenerated from its seed (checked against its fingerprint); then every
    rank compares the reference with that record (the CLI prints rank 0's report). No replay: the modules ran on
    several ranks at once."""
    if target is None or not is_artifact_path(ref) or is_artifact_path(dev) or (golden is not None and not is_artifact_path(golden)):
        raise NpuportError("under torchrun, parity compare runs MODEL on the --dev device of every rank against a record",
                           "MODEL --ref DIR --dev DEVICE [--golden DIR] (a cpu64 golden: record it first, or compare in one process)",
                           f"--ref {ref} --dev {dev}" + (f" --golden {golden}" if golden else "") + ("" if target else ", no MODEL"))
    base = _record(load_side(ref))
    opts = replace(_options_from(base.manifest, opts), store_weights=False)
    check_keep(opts.capture, ref)
    if target.dtype is None:
        target = replace(target, dtype=record_dtype(base.manifest, target))
    stored = inputs_from_artifact(base.manifest, base.inputs())
    with process_group(parse_device(dev).torch_device) as pg:
        assert pg is not None
        folder = Path(ref).resolve().parent / f".{Path(ref).name}.dev-{pg.token():012x}"
        spec, talk = rank_device(dev, pg.local_rank), rank_progress(progress, pg)
        try:
            write_ranked(pg, folder, False, lambda part: record_one(target, spec, opts, str(part), False, talk, pg,
                                                                    base.manifest, stored))
            result = _compare_sides(ref, str(folder), None, opts, golden, tolerances, False, allow_unmatched,
                                    progress if pg.rank == 0 else None)
        finally:
            pg.failed_ranks(True)  # every rank has read the record before rank 0 removes it
            if pg.rank == 0:
                shutil.rmtree(folder, ignore_errors=True)
    for i, side in enumerate(result.sides):
        if side.role == "dev":
            info = {k: v for k, v in side.info.items() if k not in ("path", "created")}
            result.sides[i] = SideInfo("dev", side.label, "live", info)
    if result.first is not None:
        result.first.notes[:] = ["no replay under torchrun: the module ran sharded over the ranks"]
    for r in result.ranks.ranks if result.ranks else []:
        if r.first is not None:
            r.first.notes[:] = ["no replay under torchrun: the module ran sharded over the ranks"]
    return result


def _compare_sides(ref: str, dev: str, target: Target | None, opts: RunOptions, golden: str | None,
                   tolerances: Tolerances | None, localize: bool, allow_unmatched: bool, progress: Progress) -> ParityResult:
    tols = tolerances or load_tolerances()
    specs = [("ref", ref), ("dev", dev)] + ([("golden", golden)] if golden else [])
    arts: dict[str, Artifact | RankedArtifact] = {}
    devices: dict[str, Device] = {}
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:  # records load in parallel: mostly hashing, GIL released
        # each in a copy of this context: the verification mode (npuport.parity.verified) is a context variable
        loading = {role: pool.submit(contextvars.copy_context().run, load_side, text)
                   for role, text in specs if is_artifact_path(text)}
        for role, text in specs:  # errors in the order of the sides, as one by one
            if role in loading:
                arts[role] = _record(loading[role].result())
            else:
                devices[role] = parse_device(text)
                devices[role].check_present()
    base = next((arts[r] for r, _ in specs if r in arts), None)
    if base is not None:
        opts = _options_from(base.manifest, opts)
        if target is not None and target.dtype is None:
            target = replace(target, dtype=record_dtype(base.manifest, target))
    if opts.capture.keep and not devices:
        raise NpuportError("--keep keeps modules in full in a side run now; every side here is a record",
                           "--keep with a device to run on (--dev npu)", " ".join(f"--keep {k}" for k in opts.capture.keep))
    check_keep(opts.capture, str(base.path) if base is not None else None)
    tols = tols.with_overrides(tf32=opts.policy.allow_tf32 or _any_tf32(arts))
    ranked = {r: a for r, a in arts.items() if isinstance(a, RankedArtifact)}
    if ranked and not devices and len(ranked) == len(arts) and same_layout(list(ranked.values())):
        return _per_rank(ranked, [r for r, _ in specs], tols, allow_unmatched, progress)
    prep = None
    live: dict[str, LiveSide] = {}
    if devices:
        if target is None:
            raise NpuportError(f"running {', '.join(d.spec for d in devices.values())} needs the model",
                               "MODEL (a model.py) or --hf CONFIG.json", "no model given")
        weights = base.weights() if base is not None else None
        stored = inputs_from_artifact(base.manifest, base.inputs()) if base is not None else None
        say(progress, f"building {target.hf_config or target.model} on the CPU (seed {opts.seed})")
        prep = prepare(target, opts, weights=weights, recorded=base.manifest if base else None, stored_inputs=stored)
        for role, d in devices.items():
            say(progress, f"running {prep.scenario.describe()} on {d.label} ({role})")
            live[role] = run_side(prep, d, opts)
    caps = {r: (arts[r].capture if r in arts else live[r].capture) for r, _ in specs}
    if "ref" in arts and "dev" in arts and arts["ref"].manifest["model"]["signature"] != arts["dev"].manifest["model"]["signature"]:
        raise NpuportError("the two artifacts were recorded from different models", "records of the same model",
                           f"{arts['ref'].manifest['model']['name']} vs {arts['dev'].manifest['model']['name']}")
    if "ref" in arts and "dev" in arts:
        same_step(arts["ref"].manifest["scenario"], arts["dev"].manifest["scenario"])
        same_seed(arts["ref"].manifest, arts["dev"].manifest)
    notes = check_same_records({r: arts[r].manifest for r, _ in specs if r in arts}) if len(arts) > 1 else []
    if "golden" in arts:
        float64_golden(arts["golden"])
    say(progress, "comparing")
    comp = compare(caps["ref"], caps["dev"], tols, caps.get("golden"), allow_unmatched)
    first = first_divergence(comp) if comp.failed else None
    if first is not None and localize:
        if caps["dev"].compiled:
            first.notes.append("no replay: the dev side ran under torch.compile, whose kernels cross module boundaries")
        elif "dev" in live and prep is not None:
            say(progress, f"replaying {first.call_key} on {live['dev'].device.label}")
            dev_full = None
            if first.call_key not in _full_calls(live["dev"].capture) and first.call_key not in _full_calls(caps["ref"]):
                keep = replace(opts, capture=replace(opts.capture, keep=opts.capture.keep + (first.module,), op_sequence=False))
                dev_full = run_side(prep, live["dev"].device, keep, module=live["dev"].module).capture
            first.replay = replay(first, caps["ref"], live["dev"], prep, tols, dev_full)
        else:
            first.notes.append("no replay: the dev side is a recorded artifact (run compare with --dev DEVICE to replay)")
    sides = [_side_info(r, arts.get(r), live.get(r)) for r, _ in specs]
    warns = [w for c in caps.values() for w in c.warnings] + comp.notes + notes
    if prep is not None:
        warns += prep.notes
    view = None
    if ranked:
        view = RankView("gathered", {r: (ranked[r].world_size if r in ranked else 1) for r, _ in specs})
        warns += [w for r, a in ranked.items() for w in a.gathered.warnings(f"{r} gathered from {a.world_size} ranks")]
    scenario = prep.scenario.to_json() if prep else (base.manifest["scenario"] if base is not None else {})
    if len({caps[r].compiled for r, _ in specs if r != "golden"}) > 1:  # an eager side against a compiled one
        scenario = dict(scenario, mode="mixed", modes={r: "compile" if caps[r].compiled else "eager" for r, _ in specs})
    return ParityResult(comp, first, sides, tols, scenario, sorted(set(warns)), ranks=view)


def _per_rank(arts: dict[str, RankedArtifact], roles: list[str], tols: Tolerances, allow_unmatched: bool,
              progress: Progress) -> ParityResult:
    """Both (all) sides per-rank records of one world size and layout: rank r against rank r."""
    ref, dev = arts["ref"], arts["dev"]
    if ref.manifest["model"]["signature"] != dev.manifest["model"]["signature"]:
        raise NpuportError("the two artifacts were recorded from different models", "records of the same model",
                           f"{ref.manifest['model']['name']} vs {dev.manifest['model']['name']}")
    same_step(ref.manifest["scenario"], dev.manifest["scenario"])
    notes = check_same_records({r: arts[r].manifest for r in roles})
    say(progress, f"comparing rank by rank ({ref.world_size} ranks)")
    view = compare_ranks(ref, dev, tols, arts.get("golden"), allow_unmatched)
    for r in view.ranks:
        if r.first is not None:
            r.first.notes.append("no replay: the dev side is a recorded artifact (run compare with --dev DEVICE to replay)")
    worst = view.ranks[view.worst or 0]
    sides = [_side_info(r, arts[r], None) for r in roles]
    warns = sorted({w for a in arts.values() for p in a.parts for w in p.capture.warnings} | set(notes))
    return ParityResult(worst.comparison, worst.first, sides, tols, ref.manifest["scenario"], warns, ranks=view)


def _full_calls(cap: Capture) -> set[str]:
    return {ck for ck, c in cap.calls.items() if all(b in cap.full for b in c["blobs"])}


def _any_tf32(arts: dict[str, Artifact | RankedArtifact]) -> bool:
    return any(a.manifest["numerics"]["requested"].get("allow_tf32") for a in arts.values())


def _options_from(manifest: dict[str, Any], opts: RunOptions) -> RunOptions:
    cap = manifest["capture"]
    sc = manifest["scenario"]
    # the record's shapes; its mode unless this run asks for another (an eager record against a compiled live side)
    asked = opts.parsed_scenario.mode
    mode = asked if asked != "eager" else sc.get("mode", "eager")
    scenario = step_spec(sc, mode)
    capture = CaptureOptions(mode=cap["mode"], ops=cap["ops"],
                             op_sequence=cap["op_sequence"], backward=cap["backward"], keep=opts.capture.keep,
                             budget_bytes=opts.capture.budget_bytes)
    req = manifest["numerics"]["requested"]
    policy = NumericsPolicy(deterministic=req["deterministic"], allow_tf32=req["allow_tf32"] or opts.policy.allow_tf32,
                            npu_compatible_impl=opts.policy.npu_compatible_impl, npu_precision_mode=opts.policy.npu_precision_mode)
    return replace(opts, scenario=scenario, seed=int(manifest["rng"]["seed"]), capture=capture, policy=policy,
                   train_mode=bool(manifest["dtype_policy"].get("train_mode")))


def record_dtype(manifest: dict[str, Any], target: Target) -> str | None:
    """The dtype a model is built in to match a record: the one asked there; for an HF config with none asked, the
    dtype its model was built in (a copy of the config whose torch_dtype differs is still the same model, which a
    model file's native dtypes cannot be cast to without changing a model of mixed dtypes)."""
    policy = manifest["dtype_policy"]
    built = policy.get("model_dtype")
    return policy.get("requested") or (built if target.hf_config and built in ("float32", "float16", "bfloat16") else None)


def _side_info(role: str, art: Artifact | RankedArtifact | None, live: LiveSide | None) -> SideInfo:
    if art is not None:
        m = art.manifest
        info = {"path": str(art.path), "device": m["device"], "numerics": m["numerics"], "dtype_policy": m["dtype_policy"],
                "capture_mode": m["capture_mode"], "compiled": (m.get("capture") or {}).get("compiled"),
                "model": m["model"]["name"], "created": m.get("created")}
        if isinstance(art, RankedArtifact):
            top = art.top
            info["distributed"] = {"world_size": art.world_size, "backend": top.get("backend"), "mesh": top.get("mesh"),
                                   "meshes": top.get("meshes", []), "layout": top.get("layout"),
                                   "parts": [p.get("path") for p in top.get("parts", [])]}
        elif "distributed" in m:
            info["distributed"] = m["distributed"]
        return SideInfo(role, m["device"]["label"], "artifact", info)
    assert live is not None
    cap = live.capture
    return SideInfo(role, live.device.label, "live", {"device": device_json(live.device, live.settings),
                    "numerics": {"in_force": live.settings}, "capture_mode": cap.mode, "compiled": cap.compiled,
                    "fault_hits": cap.fault_hits})


_STEP_KEYS = ("kind", "batch", "seq", "past")  # what fixes the step's shapes; the modes may differ (eager vs compiled)


def same_step(ref: dict[str, Any], dev: dict[str, Any]) -> None:
    """Two records compare only when they ran the same step: a prefill of 8 tokens against a decode step is not a
    divergence, it is two different inputs."""
    a, b = ({k: s.get(k) for k in _STEP_KEYS} for s in (ref, dev))
    if a != b:
        def show(s: dict[str, Any]) -> str:
            return f"{s['kind']} batch {s['batch']} x {s['seq']}" + (f", past {s['past']}" if s.get("past") else "")
        raise NpuportError("the two records ran different steps", "records of the same scenario and sizes",
                           f"{show(a)} vs {show(b)}")


def _record(art: Artifact | RankedArtifact) -> Artifact | RankedArtifact:
    """A loaded side whose manifest has what the compare reads (a per-rank record's parts are checked as loaded)."""
    for part in [art] if isinstance(art, Artifact) else art.parts:
        check_record(part)
    return art


def same_seed(ref: dict[str, Any], dev: dict[str, Any]) -> None:
    """Records of other seeds hold other weights and inputs: every entry would differ, and that is not a divergence."""
    a, b = ref["rng"].get("seed"), dev["rng"].get("seed")
    if a != b:
        raise NpuportError("the two records were made with different seeds (other weights and inputs)",
                           "records made with the same --seed", f"seed {a} vs seed {b}")


def float64_golden(art: Artifact | RankedArtifact) -> None:
    """A golden record is a float64 run (`--dev cpu64`): a float32 record as the golden would judge the other sides
    against a reference as rounded as they are, and pass what it should not."""
    device = art.manifest.get("device") or {}
    if not device.get("float64"):
        raise NpuportError(f"--golden {art.path} is not a float64 record", "a record of `parity record --dev cpu64` "
                           "(or --golden cpu64 to run it now)", f"a record on {device.get('label', '?')}")

