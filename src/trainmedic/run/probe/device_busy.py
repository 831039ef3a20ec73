"""How long the GPU itself worked in a step: the union of its kernels', copies' and memsets' spans.

On a GPU the host's time in the model's calls is not the device's: the host launches kernels
and, when it runs ahead, waits for them. A step whose kernels keep the device busy is compute
(or memory_bandwidth); a step whose device sits idle most of the time while Python launches the
next kernel is bound by the launches (nanoGPT's baby GPT without compile on an H200: 11 ms
steps, the device idle most of each). A stack sampler cannot tell the two apart, and neither
can a roofline of the counted ops (it prices the arithmetic, not the gaps); the device's own
timeline can. The PyTorch profiler (Kineto over CUPTI) records every kernel's start and duration
over the op census's warm-up steps, never over steady ones, and the union of those spans is the
time the device did anything. Holistic Trace Analysis's "temporal breakdown" reads a trace the
same way (idle versus busy time per rank).

The census steps run slower on the host (every call is counted), but a kernel's duration does
not depend on how late it was launched, so the busy time per step holds for the steady steps.
Anything that stops the profiler from starting (a CPU-only build, a profiler of the user's own
already running, no CUPTI) leaves the measurement empty, with the reason; the run goes on.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeviceBusy:
    """The device's busy time over the census steps; empty when it was not measured."""

    busy_s: float = 0.0
    steps: int = 0
    #: Kernels, copies and memsets seen over those steps.
    activities: int = 0
    problem: str | None = None

    @property
    def measured(self) -> bool:
        return self.steps > 0 and self.activities > 0

    @property
    def per_step_s(self) -> float:
        return self.busy_s / self.steps if self.steps else 0.0


def union_seconds(spans: list[tuple[int, int]]) -> float:
    """Seconds covered by ``(start_ns, end_ns)`` spans, overlaps counted once (two streams'
    kernels running at the same time are one busy device, not two)."""
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total / 1e9


class DeviceBusyProbe:
    """Starts the profiler for CUDA activity at the census's first step and reads it at its end."""

    def __init__(self) -> None:
        self._profiler: Any = None
        self.result = DeviceBusy()

    def start(self) -> None:
        try:
            from torch.profiler import ProfilerActivity, profile

            with warnings.catch_warnings():  # the user's stderr is theirs
                warnings.simplefilter("ignore")
                profiler = profile(activities=[ProfilerActivity.CUDA])
                profiler.start()
        except Exception as exc:  # noqa: BLE001 - a run's report never fails for its profiler
            self.result = DeviceBusy(problem=f"the profiler did not start ({type(exc).__name__}: {exc})")
            return
        self._profiler = profiler

    def stop(self, steps: int) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        try:
            profiler.stop()
            self.result = _busy(profiler.profiler.kineto_results.events(), steps)
        except Exception as exc:  # noqa: BLE001
            self.result = DeviceBusy(
                problem=f"the profiler's trace was unreadable ({type(exc).__name__}: {exc})"
            )


def _busy(events: Any, steps: int) -> DeviceBusy:
    from torch.autograd import DeviceType

    spans = []
    for event in events:
        if event.device_type() != DeviceType.CUDA:
            continue  # host-side events: runtime API calls, annotations
        start, duration = event.start_ns(), event.duration_ns()
        if duration > 0:
            spans.append((start, start + duration))
    if not spans:
        return DeviceBusy(steps=steps, problem="the profiler saw no kernel on the device")
    return DeviceBusy(busy_s=union_seconds(spans), steps=steps, activities=len(spans))
