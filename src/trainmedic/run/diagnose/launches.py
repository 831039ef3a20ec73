"""Is the model's time on a GPU the device's work, or the host launching it?

The sampler charges the host's time in the model's calls to compute; on a GPU that time is the
device's only when the kernels keep it busy. With small kernels the device finishes each before
Python has launched the next, and the step is bound by the launches: a larger batch then costs
little more time per step, and CUDA graphs or compiled, fused kernels cut the launches
themselves, while the compute and memory-bandwidth advice (precision, channels_last, "a larger
batch does not help") misses. nanoGPT's shakespeare_char model without compile on an H200, and
pytorch/examples' MNIST, both read as "memory-bandwidth-bound kernels" from the roofline of
their counted ops while the device was idle most of each step.

The device's own busy time (``probe/device_busy.py``) against the model's time per step
decides. The host launches while the device runs what it launched before, so a device that
keeps up is busy nearly all of the model's time (tests/scenarios/memory_bandwidth.py on the
H200: 99 %), and one idle for a large part of it waited for the host: then the host is the
step's critical path and the step shortens toward the busy time when the launches go (measured
on the H200: MNIST 12-14 % busy, a 4x batch 2.8x the step time; nanoGPT 39-44 %, a 4x batch
1.6-2.4x). Between the bands neither is claimed: the model stays compute (the roofline's
memory_bandwidth needs a busy device too), and a note gives both numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmedic.categories import COMPUTE, MEMORY_BANDWIDTH, TINY_OPS
from trainmedic.run.diagnose.resolve import Cost
from trainmedic.run.probe.device_busy import DeviceBusy
from trainmedic.units import format_seconds

#: The finding kind of a model whose step waits on its kernel launches.
LAUNCHES = "launches"
#: The device worked less than this share of the model's time: the launches bound the step.
LAUNCH_BOUND_BELOW = 0.6
#: The device worked at least this share of it: the kernels bound the step.
DEVICE_BOUND_FROM = 0.8
_MODEL = (COMPUTE, MEMORY_BANDWIDTH)


@dataclass(frozen=True)
class Launches:
    """The device's busy time against the model's, and what it says."""

    busy_s: float  # per step
    model_s: float  # per step: the host's sampled time in the model's calls
    verdict: str  # "launches" | "device" | "close"

    @property
    def ratio(self) -> float:
        return self.busy_s / self.model_s if self.model_s > 0 else 0.0

    def evidence(self) -> str:
        return (
            f"the GPU was busy {format_seconds(self.busy_s)} of the model's {format_seconds(self.model_s)} "
            f"per step ({self.ratio:.0%}, kernels, copies and memsets timed by the profiler over the census steps)"
        )

    def note(self) -> str | None:
        if self.verdict != "close":
            return None
        return (
            f"Too close to call between the kernels and their launches: {self.evidence()}. "
            f"Below {LAUNCH_BOUND_BELOW:.0%} the launches would bound the step (a larger batch nearly free), "
            f"from {DEVICE_BOUND_FROM:.0%} the kernels; `trainmedic tune` measures a larger batch."
        )


def judge(costs: list[Cost], busy: DeviceBusy, n_steps: int) -> Launches | None:
    """What the device's busy time says about the model's costs; None when it was not measured."""
    if not busy.measured or n_steps <= 0:
        return None
    model_s = sum(c.seconds for c in costs if c.category in _MODEL) / n_steps
    if model_s <= 0:
        return None
    ratio = busy.per_step_s / model_s
    verdict = (
        "launches" if ratio < LAUNCH_BOUND_BELOW else "device" if ratio >= DEVICE_BOUND_FROM else "close"
    )
    return Launches(busy.per_step_s, model_s, verdict)


def settle(costs: list[Cost], launches: Launches | None) -> list[Cost]:
    """The model's costs as the device's busy time reads them.

    Launch-bound: ``tiny_ops`` of kind ``launches``, each keeping its phase (forward, backward,
    optimizer) for the split. Too close to call: compute, not memory_bandwidth (the roofline
    places kernels that are not what the step waits for).
    """
    if launches is None or launches.verdict == "device":
        return costs
    settled = []
    for cost in costs:
        if cost.category in _MODEL and launches.verdict == "launches":
            cost = replace(cost, category=TINY_OPS, kind=LAUNCHES, phase=cost.phase or cost.kind)
        elif cost.category == MEMORY_BANDWIDTH:
            cost = replace(cost, category=COMPUTE)
        settled.append(cost)
    return settled
