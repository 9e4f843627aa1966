"""The whole step next to the sum of its ops: catches "each op faster, the step slower".

The step is the scenario's forward (prefill / decode) or forward + backward (train) of the model built with
real random weights on the device. Its time is compared with sum(op median x calls) over every compute call
the audit recorded; on a device, a profile of one step also gives the time the kernels themselves took and
how many ran, which splits the gap into idle time between kernels (launches, host work, syncs) and kernels
the audit did not see or that ran slower in context (extra copies, casts, different kernel choices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from npuport.bench.kernels import device_us
from npuport.devices.profiler_chatter import without_profiler_chatter
from npuport.devices.timer import Clock, Measurement, measure

GAP_TOLERANCE = 0.10  # the step may exceed the op sum by this share before it is flagged
# The op sum may exceed the step by this share before the verdict says the op timings do not add up. Timed alone, an
# op pays what it does not pay inside the step (a sync per repetition, inputs rotated out of cache, the host's
# launch not hidden behind the previous kernel), so a sum somewhat above the step is the normal case; at half as
# much again the isolated timings no longer describe the step: a noisy median, or ops that overlap in the step
# (streams, async launches), and "the step is the sum of its ops" would state what the numbers contradict.
EXCESS_TOLERANCE = 0.50


@dataclass
class EndToEnd:
    step: Measurement | None
    ops_sum_s: float  # sum of measured op medians x calls
    ops_estimated_s: float  # the audit's estimate for the ops that could not be timed (added to the sum)
    measured_calls: int
    total_calls: int
    kernel_time_s: float | None = None  # device kernel time in one profiled step
    kernels: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def op_total_s(self) -> float:
        return self.ops_sum_s + self.ops_estimated_s

    @property
    def gap_s(self) -> float | None:
        return self.step.stats.median - self.op_total_s if self.step else None

    @property
    def flagged(self) -> bool:
        return self.step is not None and self.step.stats.median > self.op_total_s * (1 + GAP_TOLERANCE)

    @property
    def ops_exceed_step(self) -> bool:
        """The op sum is well above the whole step: the op timings do not add up to it (noise or overlap)."""
        return self.step is not None and self.op_total_s > self.step.stats.median * (1 + EXCESS_TOLERANCE)

    def verdict(self) -> str:
        if self.step is None:
            return f"end-to-end step not timed: {self.error}"
        t, ops = self.step.stats.median, self.op_total_s
        if self.ops_exceed_step:
            return (f"step {t * 1e3:.3f} ms vs ops {ops * 1e3:.3f} ms: the op timings do not add up to the step (their "
                    f"sum is {ops / t:.1f}x it; likely noisy op timings or ops that overlap in the step)")
        if not self.flagged:
            return f"step {t * 1e3:.3f} ms vs ops {ops * 1e3:.3f} ms: the step is the sum of its ops"
        gap = t - ops
        text = (f"each op faster, the step slower: step {t * 1e3:.3f} ms, sum of its ops {ops * 1e3:.3f} ms; "
                f"{gap * 1e3:.3f} ms ({gap / t:.0%}) is outside the ops as benchmarked")
        if self.kernel_time_s is not None:
            idle = max(0.0, t - self.kernel_time_s)
            extra = self.kernel_time_s - ops
            text += (f"; in a profiled step the device was idle {idle * 1e3:.3f} ms between kernels (launch gaps,"
                     f" host work, syncs) and kernels took {extra * 1e3:+.3f} ms more than the op sum (extra copies,"
                     f" casts, other kernel choices; {self.kernels} kernels for {self.total_calls} recorded calls)")
        if self.total_calls:
            text += f"; {gap / self.total_calls * 1e6:.1f} us per recorded call"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step.to_json() if self.step else None, "ops_sum_s": self.ops_sum_s,
                "ops_estimated_s": self.ops_estimated_s, "op_total_s": self.op_total_s, "measured_calls": self.measured_calls,
                "total_calls": self.total_calls, "gap_s": self.gap_s, "flagged": self.flagged,
                "ops_exceed_step": self.ops_exceed_step,
                "kernel_time_s": self.kernel_time_s, "kernels": self.kernels, "verdict": self.verdict(),
                "notes": self.notes, "error": self.error}


def _to_device(tree: Any, device: str) -> Any:
    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


def time_step(load: Callable[[], Any], scenario: Any, device: str, clock: Clock, warmup: int = 3, reps: int = 10,
              budget_s: float = 3.0, sync: Callable[[], None] | None = None,
              profile: bool = True) -> tuple[Measurement, float | None, int | None]:
    """Median step time (fresh inputs every repetition: a decode step appends to its KV cache), and the device
    kernel time and kernel count of one profiled step."""
    with torch.device(device):
        target = load()
        module = target.module.to(device)
    train = scenario.kind == "train"
    module.train(train)

    def make(_i: int) -> Any:
        with torch.device(device):
            inputs = target.make_inputs(scenario)
        if train:
            for p in module.parameters():
                p.grad = None
        return _to_device(inputs, device)

    def step(inputs: Any) -> None:
        args, kwargs = inputs
        if train:
            out = module(*args, **kwargs)
            loss = target.loss(out, inputs) if target.loss else getattr(out, "loss", None)
            if loss is None:
                loss = (out if isinstance(out, torch.Tensor) else out[0]).float().sum()
            loss.backward()
        else:
            with torch.no_grad():
                module(*args, **kwargs)

    m = measure(step, make, clock, warmup=warmup, reps=reps, min_reps=3, budget_s=budget_s)
    kernel_s = count = None
    if profile and clock.kind == "device-events":
        kernel_s, count = _profile_step(step, make(0), device, sync)
    del module, target
    return m, kernel_s, count


def _profile_step(step: Callable[[Any], None], inputs: Any, device: str, sync: Callable[[], None] | None) -> tuple[float, int]:
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 - optional dependency, imported where it is used

    acts = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        acts.append(ProfilerActivity.CUDA)
    elif hasattr(ProfilerActivity, "PrivateUse1"):
        acts.append(ProfilerActivity.PrivateUse1)
    with without_profiler_chatter(), profile(activities=acts) as prof:
        step(inputs)
        if sync:
            sync()
    cpu = torch.autograd.DeviceType.CPU
    total_us, n = 0.0, 0
    for ev in prof.events():
        if getattr(ev, "device_type", cpu) != cpu:
            total_us += device_us(ev)
            n += 1
    return total_us / 1e6, n
