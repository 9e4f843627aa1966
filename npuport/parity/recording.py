"""Record one side: run the model on a device and write its artifact (artifact.py); under torchrun, every rank
its own part and rank 0 the manifest naming them (ranked.py, procgroup.py).

The manifest says everything the other machine needs to reproduce and judge the run: model signature, devices and
versions, numerics in force, seeds, capture options, sequences, the weights' fingerprint (a sharded weight counted
whole, so records of any layout agree), and under torchrun the rank, world size, backend and the model's mesh.
"""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path
from typing import Any, Callable

import torch

import npuport
from npuport.devices.device import Device, parse_device, preserved_numerics
from npuport.errors import NpuportError
from npuport.parity.artifact import check_writable, save_artifact
from npuport.parity.entries import Capture, CaptureOptions
from npuport.parity.identity import model_identity
from npuport.parity.procgroup import RankInfo, process_group, rank_device
from npuport.parity.ranked import write_ranked
from npuport.parity.session import GENERATOR, LiveSide, Prepared, RunOptions, Target, input_record, prepare, run_side
from npuport.parity.shards import local_state, model_mesh
from npuport.parity.stats import CHECKSUM, SAMPLE
from npuport.parity.tolerances import load_tolerances

Progress = Callable[[str], None] | None


def say(progress: Progress, msg: str) -> None:
    if progress:
        progress(msg)


def side_manifest(prep: Prepared, side: LiveSide, opts: RunOptions, target: Target) -> dict[str, Any]:
    lm, dev = prep.lm, side.device
    model: dict[str, Any] = {"name": lm.name, "origin": lm.origin, "kind": "hf" if target.hf_config else "file",
                             "signature": prep.signature, "parameters": lm.parameters, "entry": target.entry, "attn": target.attn,
                             "max_positions": lm.max_positions, **model_identity(lm.config, lm.module, lm.source_files)}
    cap = side.capture
    mods = cap.module_sequence
    ops = cap.op_sequence
    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"npuport": npuport.__version__},
        "model": model,
        "scenario": prep.scenario.to_json(),
        "device": device_json(dev, side.settings),
        "dtype_policy": {"model_dtype": lm.dtype, "requested": target.dtype, "compute": "float64" if dev.float64 else lm.dtype,
                         "autocast": None, "train_mode": opts.train_mode},
        "numerics": {"requested": opts.policy.to_json(), "in_force": side.settings},
        "rng": {"seed": opts.seed, "weights_seed": opts.seed, "inputs_seed": opts.seed + 1, "run_seed": opts.seed + 2},
        "capture": dict(opts.capture.to_json(), sample=SAMPLE, checksum=CHECKSUM, stats_kernels=sorted(cap.stats_kernels),
                        compiled=cap.compiled),
        "module_sequence": {"items": mods, "sha256": _seq_hash(mods)},
        "op_sequence": {"items": ops, "sha256": _seq_hash(ops) if ops is not None else None},
        "warnings": cap.warnings + prep.notes,
    }


def device_json(dev: Device, settings: dict[str, Any]) -> dict[str, Any]:
    fault = dev.fault
    return {"spec": dev.spec, "label": dev.label, "kind": dev.kind, "torch_device": dev.torch_device, "standin": dev.standin,
            "float64": dev.float64, "fault": None if fault is None else {"op": fault.op, "module": fault.module, "scale": fault.scale},
            "versions": dev.versions()}


def _seq_hash(items: list[str] | None) -> str | None:
    return None if items is None else hashlib.sha256("\n".join(items).encode()).hexdigest()


def record(target: Target, device: str, opts: RunOptions, out_dir: str, force: bool = False, progress: Progress = None) -> Path:
    """Run MODEL on `device` and write the artifact to `out_dir` (atomically). Under torchrun (or in a process group
    the caller made) every rank writes its own part and rank 0 the manifest naming them (ranked.py)."""
    with preserved_numerics():
        check_keep(opts.capture)
        check_writable(out_dir, force)
        probe = parse_device(device)
        with process_group(probe.torch_device) as pg:
            if pg is None:
                return record_one(target, device, opts, out_dir, force, progress)
            spec = rank_device(device, pg.local_rank)
            talk = rank_progress(progress, pg)
            return write_ranked(pg, out_dir, force, lambda part: record_one(target, spec, opts, str(part), False, talk, pg))


def check_keep(capture: CaptureOptions, record: str | None = None) -> None:
    """--keep keeps modules in full in a stats-only capture; a full capture keeps every module already, so the
    option did nothing, silently. `record`: the record the capture mode was taken from (a compare)."""
    if not capture.keep or capture.mode == "stats":
        return
    keep = " ".join(f"--keep {k}" for k in capture.keep)
    if record is None:
        raise NpuportError("--keep keeps modules in full in a stats-only capture; without --stats-only every module "
                           "is kept in full already", "--keep with --stats-only, or no --keep", f"{keep} without --stats-only")
    raise NpuportError(f"--keep keeps modules in full in a stats-only capture; the record {record} is a full capture, "
                       "so the side run now keeps every module in full already",
                       "--keep only against a stats-only record, or no --keep", f"{keep} with a full record")


def rank_progress(progress: Progress, pg: RankInfo) -> Progress:
    if progress is None:
        return None
    return lambda msg: progress(f"[rank {pg.rank}/{pg.world_size}] {msg}")


def record_one(target: Target, device: str, opts: RunOptions, out_dir: str, force: bool, progress: Progress,
               pg: RankInfo | None = None, recorded: dict[str, Any] | None = None, stored_inputs: Any = None) -> Path:
    """One artifact (one rank's part under `pg`). With `recorded` (another record's manifest) the model must be that
    record's and its regenerated weights match its fingerprint; `stored_inputs` are that record's inputs."""
    check_writable(out_dir, force)
    dev = parse_device(device)
    dev.check_present()
    say(progress, f"building {target.hf_config or target.model} on the CPU (seed {opts.seed})")
    prep = prepare(target, opts, recorded=recorded, stored_inputs=stored_inputs)
    say(progress, f"running {prep.scenario.describe()} on {dev.label}")
    side = run_side(prep, dev, opts)
    manifest = side_manifest(prep, side, opts, target)
    store = opts.store_weights if opts.store_weights is not None else opts.capture.mode == "full"
    manifest["weights"] = {"stored": store, "generator": GENERATOR, "seed": opts.seed, "torch": torch.__version__,
                           "fingerprint": prep.fingerprint}
    info, tensors = input_record(prep)
    manifest["inputs"] = info
    manifest["warnings"] = manifest["warnings"] + nondeterminism_notes(side.capture, dev)
    weights = {k: v for k, v in prep.lm.module.state_dict().items()} if store else None
    if pg is not None:
        manifest["distributed"] = dict(pg.to_json(), mesh=model_mesh(prep.lm.module))
        if weights is not None:
            weights, placed = local_state(weights)  # this rank's shards; compare gathers them with their placements
            if placed:
                manifest["weights"]["dist"] = placed
    say(progress, f"writing {out_dir}")
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
