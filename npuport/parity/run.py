"""The parity pipelines behind the commands: record one side to an artifact; compare any two sides.

A side is either a device spec (run here, now) or an artifact directory (recorded elsewhere). Settings that make
entries comparable (scenario, seed, dtype, capture options) come from the first artifact when there is one.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

import npuport
from npuport.devices.device import Device, NumericsPolicy, parse_device, preserved_numerics
from npuport.errors import NpuportError
from npuport.parity.artifact import Artifact, check_writable, load_artifact, save_artifact
from npuport.parity.compare import Comparison, compare
from npuport.parity.entries import Capture, CaptureOptions
from npuport.parity.localize import FirstDivergence, first_divergence, replay
from npuport.parity.session import (
    GENERATOR,
    LiveSide,
    Prepared,
    RunOptions,
    Target,
    input_record,
    inputs_from_artifact,
    prepare,
    run_side,
)
from npuport.parity.stats import CHECKSUM, SAMPLE
from npuport.parity.tolerances import Tolerances, load_tolerances

Progress = Callable[[str], None] | None


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

    def __bool__(self) -> bool:
        return bool(self.comparison)

    @property
    def verdict_line(self) -> str:
        text = str(self.comparison)
        if self.first is not None and not self:
            text += f"; {self.first}"
        return text


def _say(progress: Progress, msg: str) -> None:
    if progress:
        progress(msg)


def is_artifact_path(text: str) -> bool:
    return Path(text).exists() or "/" in text or text.startswith(".")


def side_manifest(prep: Prepared, side: LiveSide, opts: RunOptions, target: Target) -> dict[str, Any]:
    lm, dev = prep.lm, side.device
    model: dict[str, Any] = {"name": lm.name, "origin": lm.origin, "kind": "hf" if target.hf_config else "file",
                             "signature": prep.signature, "parameters": lm.parameters, "entry": target.entry, "attn": target.attn}
    if lm.config is not None:
        model["config_sha256"] = hashlib.sha256(json.dumps(lm.config, sort_keys=True).encode()).hexdigest()
    elif lm.source_files:
        model["file_sha256"] = hashlib.sha256(Path(lm.source_files[0]).read_bytes()).hexdigest()
    cap = side.capture
    mods = cap.module_sequence
    ops = cap.op_sequence
    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"npuport": npuport.__version__},
        "model": model,
        "scenario": prep.scenario.to_json(),
        "device": _device_json(dev, side.settings),
        "dtype_policy": {"model_dtype": lm.dtype, "requested": target.dtype, "compute": "float64" if dev.float64 else lm.dtype,
                         "autocast": None, "train_mode": opts.train_mode},
        "numerics": {"requested": opts.policy.to_json(), "in_force": side.settings},
        "rng": {"seed": opts.seed, "weights_seed": opts.seed, "inputs_seed": opts.seed + 1, "run_seed": opts.seed + 2},
        "capture": dict(opts.capture.to_json(), sample=SAMPLE, checksum=CHECKSUM, stats_kernels=sorted(cap.stats_kernels)),
        "module_sequence": {"items": mods, "sha256": _seq_hash(mods)},
        "op_sequence": {"items": ops, "sha256": _seq_hash(ops) if ops is not None else None},
        "warnings": cap.warnings + prep.notes,
    }


def _device_json(dev: Device, settings: dict[str, Any]) -> dict[str, Any]:
    fault = dev.fault
    return {"spec": dev.spec, "label": dev.label, "kind": dev.kind, "torch_device": dev.torch_device, "standin": dev.standin,
            "float64": dev.float64, "fault": None if fault is None else {"op": fault.op, "module": fault.module, "scale": fault.scale},
            "versions": dev.versions()}


def _seq_hash(items: list[str] | None) -> str | None:
    return None if items is None else hashlib.sha256("\n".join(items).encode()).hexdigest()


def record(target: Target, device: str, opts: RunOptions, out_dir: str, force: bool = False, progress: Progress = None) -> Path:
    """Run MODEL on `device` and write the artifact to `out_dir` (atomically)."""
    with preserved_numerics():
        return _record(target, device, opts, out_dir, force, progress)


def _record(target: Target, device: str, opts: RunOptions, out_dir: str, force: bool, progress: Progress) -> Path:
    check_writable(out_dir, force)
    dev = parse_device(device)
    dev.check_present()
    _say(progress, f"building {target.hf_config or target.model} on the CPU (seed {opts.seed})")
    prep = prepare(target, opts)
    _say(progress, f"running {prep.scenario.describe()} on {dev.label}")
    side = run_side(prep, dev, opts)
    manifest = side_manifest(prep, side, opts, target)
    store = opts.store_weights if opts.store_weights is not None else opts.capture.mode == "full"
    manifest["weights"] = {"stored": store, "generator": GENERATOR, "seed": opts.seed, "torch": torch.__version__,
                           "fingerprint": prep.fingerprint}
    info, tensors = input_record(prep)
    manifest["inputs"] = info
    manifest["warnings"] = manifest["warnings"] + nondeterminism_notes(side.capture, dev)
    weights = {k: v for k, v in prep.lm.module.state_dict().items()} if store else None
    _say(progress, f"writing {out_dir}")
    return save_artifact(out_dir, manifest, side.capture, tensors, weights, force)


def nondeterminism_notes(cap: Capture, dev: Device) -> list[str]:
    notes = [f"nondeterministic op warning: {w}" for w in cap.warnings]
    if dev.kind == "npu" and cap.op_sequence:
        listed = set(load_tolerances().nondeterministic.get("npu", ()))
        seen = sorted(set(cap.op_sequence) & listed)
        if seen:
            notes.append("npu: these ops are nondeterministic on Atlas A2/A3 unless deterministic mode is on, and torch_npu "
                         f"does not warn: {', '.join(seen)}")
    return notes


def run_parity(ref: str, dev: str, target: Target | None, opts: RunOptions, golden: str | None = None,
               tolerances: Tolerances | None = None, localize: bool = True, allow_unmatched: bool = False,
               progress: Progress = None) -> ParityResult:
    """Compare `dev` against `ref` (each a device spec or an artifact directory), optionally with a golden."""
    with preserved_numerics():
        return _run_parity(ref, dev, target, opts, golden, tolerances, localize, allow_unmatched, progress)


def _run_parity(ref: str, dev: str, target: Target | None, opts: RunOptions, golden: str | None,
                tolerances: Tolerances | None, localize: bool, allow_unmatched: bool, progress: Progress) -> ParityResult:
    tols = tolerances or load_tolerances()
    specs = [("ref", ref), ("dev", dev)] + ([("golden", golden)] if golden else [])
    arts: dict[str, Artifact] = {}
    devices: dict[str, Device] = {}
    for role, text in specs:
        if is_artifact_path(text):
            arts[role] = load_artifact(text)
        else:
            devices[role] = parse_device(text)
            devices[role].check_present()
    base = next((arts[r] for r, _ in specs if r in arts), None)
    if base is not None:
        opts = _options_from(base.manifest, opts)
        if target is not None and target.dtype is None:
            target = replace(target, dtype=base.manifest["dtype_policy"].get("requested"))
    tols = tols.with_overrides(tf32=opts.policy.allow_tf32 or _any_tf32(arts))
    prep = None
    live: dict[str, LiveSide] = {}
    if devices:
        if target is None:
            raise NpuportError(f"running {', '.join(d.spec for d in devices.values())} needs the model",
                               "MODEL (a model.py) or --hf CONFIG.json", "no model given")
        weights = base.weights() if base is not None else None
        stored = inputs_from_artifact(base.manifest, base.inputs()) if base is not None else None
        _say(progress, f"building {target.hf_config or target.model} on the CPU (seed {opts.seed})")
        prep = prepare(target, opts, weights=weights, recorded=base.manifest if base else None, stored_inputs=stored)
        for role, d in devices.items():
            _say(progress, f"running {prep.scenario.describe()} on {d.label} ({role})")
            live[role] = run_side(prep, d, opts)
    caps = {r: (arts[r].capture if r in arts else live[r].capture) for r, _ in specs}
    if "ref" in arts and "dev" in arts and arts["ref"].manifest["model"]["signature"] != arts["dev"].manifest["model"]["signature"]:
        raise NpuportError("the two artifacts were recorded from different models", "records of the same model",
                           f"{arts['ref'].manifest['model']['name']} vs {arts['dev'].manifest['model']['name']}")
    _say(progress, "comparing")
    comp = compare(caps["ref"], caps["dev"], tols, caps.get("golden"), allow_unmatched)
    first = first_divergence(comp) if comp.failed else None
    if first is not None and localize:
        if "dev" in live and prep is not None:
            _say(progress, f"replaying {first.call_key} on {live['dev'].device.label}")
            dev_full = None
            if first.call_key not in _full_calls(live["dev"].capture) and first.call_key not in _full_calls(caps["ref"]):
                keep = replace(opts, capture=replace(opts.capture, keep=opts.capture.keep + (first.module,), op_sequence=False))
                dev_full = run_side(prep, live["dev"].device, keep, module=live["dev"].module).capture
            first.replay = replay(first, caps["ref"], live["dev"], prep, tols, dev_full)
        else:
            first.notes.append("no replay: the dev side is a recorded artifact (run compare with --dev DEVICE to replay)")
    sides = [_side_info(r, arts.get(r), live.get(r)) for r, _ in specs]
    warns = [w for c in caps.values() for w in c.warnings]
    if prep is not None:
        warns += prep.notes
    return ParityResult(comp, first, sides, tols, (prep.scenario.to_json() if prep else base.manifest["scenario"]) if (prep or base) else {}, sorted(set(warns)))


def _full_calls(cap: Capture) -> set[str]:
    return {ck for ck, c in cap.calls.items() if all(b in cap.full for b in c["blobs"])}


def _any_tf32(arts: dict[str, Artifact]) -> bool:
    return any(a.manifest["numerics"]["requested"].get("allow_tf32") for a in arts.values())


def _options_from(manifest: dict[str, Any], opts: RunOptions) -> RunOptions:
    cap = manifest["capture"]
    sc = manifest["scenario"]
    scenario = f"{sc['name']}:batch={sc['batch']},seq={sc['seq']}" + (f",past={sc['past']}" if sc.get("past") else "")
    capture = CaptureOptions(mode=cap["mode"], ops=cap["ops"],
                             op_sequence=cap["op_sequence"], backward=cap["backward"], keep=opts.capture.keep,
                             budget_bytes=opts.capture.budget_bytes)
    req = manifest["numerics"]["requested"]
    policy = NumericsPolicy(deterministic=req["deterministic"], allow_tf32=req["allow_tf32"] or opts.policy.allow_tf32,
                            npu_compatible_impl=opts.policy.npu_compatible_impl, npu_precision_mode=opts.policy.npu_precision_mode)
    return replace(opts, scenario=scenario, seed=int(manifest["rng"]["seed"]), capture=capture, policy=policy,
                   train_mode=bool(manifest["dtype_policy"].get("train_mode")))


def _side_info(role: str, art: Artifact | None, live: LiveSide | None) -> SideInfo:
    if art is not None:
        m = art.manifest
        return SideInfo(role, m["device"]["label"], "artifact", {"path": str(art.path), "device": m["device"],
                        "numerics": m["numerics"], "dtype_policy": m["dtype_policy"], "capture_mode": m["capture_mode"],
                        "model": m["model"]["name"], "created": m.get("created")})
    assert live is not None
    cap = live.capture
    return SideInfo(role, live.device.label, "live", {"device": _device_json(live.device, live.settings),
                    "numerics": {"in_force": live.settings}, "capture_mode": cap.mode, "fault_hits": cap.fault_hits})
