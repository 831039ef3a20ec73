"""The roofline's numbers: what a step costs, what a device can do, where the step sits."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepCost:
    """FLOPs and bytes of one training step (forward, loss, backward, optimizer) at one batch size."""

    batch_size: int
    precision: str
    flops: float
    #: Bytes read and written by the step's ops, each counted as its own kernel (unfused).
    bytes: float
    #: ``forward`` / ``backward`` / ``optimizer`` -> FLOPs and bytes of that part of the step.
    flops_by_phase: dict[str, float] = field(default_factory=dict)
    bytes_by_phase: dict[str, float] = field(default_factory=dict)
    #: ``"matmul/conv"`` (ops with FLOPs) and ``"elementwise/other"`` (the rest) -> bytes: a
    #: large second share is why a step is bandwidth-bound.
    bytes_by_kind: dict[str, float] = field(default_factory=dict)
    #: aten op name (``"addmm"``, ``"native_batch_norm_backward"``) -> bytes, largest first.
    bytes_by_op: dict[str, float] = field(default_factory=dict)
    #: (FLOPs, bytes) of every op of the step, in order: the roofline places each op under its
    #: own roof, so a step of compute-bound convolutions and bandwidth-bound norms is not
    #: judged by one averaged intensity.
    ops: tuple[tuple[float, float], ...] = ()

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte moved."""
        return self.flops / self.bytes if self.bytes > 0 else float("inf")

    def top_ops(self, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` ops that move the most bytes, with their share of the step's bytes."""
        total = self.bytes or 1.0
        return [(name, moved / total) for name, moved in list(self.bytes_by_op.items())[:n]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "precision": self.precision,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "flops_by_phase": dict(self.flops_by_phase),
            "bytes_by_phase": dict(self.bytes_by_phase),
            "bytes_by_kind": dict(self.bytes_by_kind),
            "bytes_by_op": dict(self.bytes_by_op),
        }


@dataclass(frozen=True)
class Ceilings:
    """What the device can do at most: peak FLOP/s per precision and memory bandwidth."""

    device: str
    #: FLOP/s per precision key of PRECISIONS; a missing key: no fast path for it.
    peak_flops: dict[str, float]
    bandwidth_bytes_per_s: float
    #: "catalog" (datasheet numbers of a known GPU) or "measured" (a matmul and a copy, cached).
    source: str

    def peak(self, precision: str) -> float | None:
        """The compute ceiling a configuration of ``precision`` runs under (None: no fast path)."""
        return self.peak_flops.get(precision)

    @property
    def ridge(self) -> dict[str, float]:
        """Arithmetic intensity (FLOP/byte) where each precision's roof meets the bandwidth slope."""
        if self.bandwidth_bytes_per_s <= 0:
            return {}
        return {p: f / self.bandwidth_bytes_per_s for p, f in self.peak_flops.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "peak_flops": dict(self.peak_flops),
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "ridge": self.ridge,
            "source": self.source,
        }


@dataclass(frozen=True)
class Roofline:
    """Where one configuration sits under the device's roofs.

    Each op of the step is placed under its own roof (its FLOPs over the peak, or its bytes over
    the bandwidth, whichever takes longer): ``roofline_s`` is the sum, the fastest the step could
    run on this device, and ``bandwidth_share`` the part of it spent in ops left of the ridge.
    A step is bandwidth-bound when most of that time is; one averaged intensity would call a
    step of compute-bound convolutions and bandwidth-bound norms whatever the average says.
    """

    flops_per_step: float
    #: Bytes read and written by the step's kernels, each op counted unfused (inputs + outputs).
    bytes_per_step: float
    peak_flops: float
    bandwidth_bytes_per_s: float
    #: FLOP/s reached: ``flops_per_step`` over the measured step time.
    achieved_flops: float
    #: The measured step time this roofline places.
    step_s: float = 0.0
    #: The step time the roofs allow (sum over ops of max(FLOPs/peak, bytes/bandwidth)).
    roofline_s: float | None = None
    #: Share of ``roofline_s`` in ops under the bandwidth roof.
    bandwidth_share: float | None = None

    @property
    def intensity(self) -> float:
        return self.flops_per_step / self.bytes_per_step if self.bytes_per_step > 0 else float("inf")

    @property
    def ridge(self) -> float:
        return self.peak_flops / self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s > 0 else 0.0

    @property
    def bound(self) -> str:
        """``"bandwidth"`` when most of the roofline time is in bandwidth-bound ops, else ``"compute"``
        (without per-op counts: left or right of the ridge)."""
        if self.bandwidth_share is not None:
            return "bandwidth" if self.bandwidth_share >= 0.5 else "compute"
        return "bandwidth" if self.intensity < self.ridge else "compute"

    @property
    def attainable_flops(self) -> float:
        """The roof over this intensity: min(peak, intensity × bandwidth)."""
        return min(self.peak_flops, self.intensity * self.bandwidth_bytes_per_s)

    @property
    def share_of_ceiling(self) -> float:
        """How close the measured step comes to the roofs: roofline time over measured time."""
        if self.roofline_s is not None and self.step_s > 0:
            return self.roofline_s / self.step_s
        return self.achieved_flops / self.attainable_flops if self.attainable_flops > 0 else 0.0

    @property
    def achieved_bandwidth(self) -> float:
        """Bytes per second the step moved (by the unfused count)."""
        return self.bytes_per_step / self.step_s if self.step_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "flops_per_step": self.flops_per_step,
            "bytes_per_step": self.bytes_per_step,
            "intensity": self.intensity if math.isfinite(self.intensity) else None,  # JSON has no Infinity
            "ridge": self.ridge,
            "bound": self.bound,
            "peak_flops": self.peak_flops,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "achieved_flops": self.achieved_flops,
            "attainable_flops": self.attainable_flops,
            "share_of_ceiling": self.share_of_ceiling,
            "step_s": self.step_s,
            "roofline_s": self.roofline_s,
            "bandwidth_share": self.bandwidth_share,
        }
