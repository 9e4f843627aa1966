"""The estimated step for the host a profile was recorded on: an eager step's host side scales with how fast that
host dispatches (mappings/timing.yaml's host costs hold for the host probe they were fit at, `reference_probe_s`),
and the lent machines' host speed differs by up to 2.5x between machines and moves within one (docs/profile.md). A
profile that `npuport profile record` wrote carries the host probes taken before and after each timed step; the step
is simulated again with the host costs scaled to the median of the steps' probes (`step_probes`), so that the
measurement is held against an estimate for its own host as well as against the one for the calibration's."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Sequence

from npuport.cost.inventory import NO_GRAPH_INPUTS, GraphInputs, ReportedCall, step_time
from npuport.cost.roofline import ChipProfile
from npuport.cost.timing import reference_probe_s, timing_for


def step_probes(unprofiled: dict[str, Any]) -> list[float] | None:
    """The host's speed (seconds per tiny eager op) during each timed step: the mean of the probes right before and
    right after it where both were taken, else the one before (profiles recorded before the probe after a step
    existed); None without per-step probes. The lent H200s' hosts switch between two speeds (about 1.45x apart)
    within a step in 7-18% of steps; bracketing the step followed its host time better than the probe before alone
    (`scripts/diag_host_cpus.py`, docs/profile.md)."""
    before = [float(p) for p in unprofiled.get("probe_s") or []]
    if not before or not all(before):
        return None
    after = [float(p) for p in unprofiled.get("probe_after_s") or []]
    if len(after) == len(before) and all(after):
        return [(b + a) / 2 for b, a in zip(before, after)]
    return before


def recorded_probe(profile: dict[str, Any]) -> float | None:
    """The host probe (seconds per tiny eager op) of the profile's timed steps: the median of each step's probe
    (`step_probes`), else the one taken after all of them; None for a profile without one (imported traces)."""
    probes = step_probes(profile.get("unprofiled") or {})
    if probes:
        return statistics.median(probes)
    after = (profile.get("host_probe") or {}).get("op_s")
    return float(after) if after else None


def at_recorded_host(calls: Sequence[ReportedCall], chip: ChipProfile, profile: dict[str, Any],
                     mode: str = "eager", graph_inputs: GraphInputs = NO_GRAPH_INPUTS) -> dict[str, Any] | None:
    """The step estimated for the profile's host speed, or None where the profile has no probe, the chip's host
    costs have no reference probe to scale from, or the step has no host cost per op or kernel (graph mode)."""
    probe = recorded_probe(profile)
    tm = timing_for(chip)
    ref = tm.host.reference_probe_s
    if probe is None or not ref or mode not in ("eager", "compile", "reduce-overhead"):
        return None
    st = step_time(calls, chip, mode, model=replace(tm, host=tm.host.scaled(probe)),  # type: ignore[arg-type]
                   graph_inputs=graph_inputs)
    # the probe the costs were fit at, for the report: the model's own reads the user's where `--host-probe` scaled it
    return {"probe_s": probe, "reference_probe_s": reference_probe_s(chip) or ref, "step_s": st.step_s, "host_s": st.host_s,
            "bound": st.bound}
