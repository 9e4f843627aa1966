"""The estimated step for the host a profile was recorded on: an eager step's host side scales with how fast that
host dispatches (mappings/timing.yaml's host costs hold for the host probe they were fit at, `reference_probe_s`),
and the lent machines' host speed moves by up to 1.9x between runs and within one (docs/profile.md). A profile that
`npuport profile record` wrote carries the host probe taken before each timed step; the step is simulated again with
the host costs scaled to the median of those probes, so that the measurement is held against an estimate for its
own host as well as against the one for the calibration's."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Sequence

from npuport.cost.inventory import ReportedCall, step_time
from npuport.cost.roofline import ChipProfile
from npuport.cost.timing import timing_for


def recorded_probe(profile: dict[str, Any]) -> float | None:
    """The host probe (seconds per tiny eager op) of the profile's timed steps: the median of those taken before each
    step, else the one taken after them; None for a profile without one (imported traces)."""
    plain = profile.get("unprofiled") or {}
    probes = [float(p) for p in plain.get("probe_s") or [] if p]
    if probes:
        return statistics.median(probes)
    after = (profile.get("host_probe") or {}).get("op_s")
    return float(after) if after else None


def at_recorded_host(calls: Sequence[ReportedCall], chip: ChipProfile, profile: dict[str, Any],
                     mode: str = "eager") -> dict[str, Any] | None:
    """The step estimated for the profile's host speed, or None where the profile has no probe, the chip's host
    costs have no reference probe to scale from, or the step has no host cost per op (graph mode)."""
    probe = recorded_probe(profile)
    tm = timing_for(chip)
    ref = tm.host.reference_probe_s
    if probe is None or not ref or mode != "eager":
        return None
    st = step_time(calls, chip, "eager", model=replace(tm, host=tm.host.scaled(probe)))
    return {"probe_s": probe, "reference_probe_s": ref, "step_s": st.step_s, "host_s": st.host_s,
            "bound": st.bound}
