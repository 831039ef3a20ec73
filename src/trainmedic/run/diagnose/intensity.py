"""Bandwidth-bound or compute-bound: the run's counted FLOPs and bytes under the device's roofs.

On a GPU the host waits while the kernels run, so the stack sampler can only say "the model's
compute". Whether those kernels were limited by arithmetic or by memory traffic is read from
the op census's counts (``probe/op_costs.py``: FLOPs and bytes of every op of the counted
warm-up steps) placed under the card's datasheet roofs (``trainmedic.devices``), with the same
per-op roofline ``trainmedic tune`` uses (``roofline.place.roofline``): each op sits under the
roof that takes it longer, and the step is bandwidth-bound when most of that time is spent in
ops left of the ridge point. One averaged intensity would call a step of compute-bound
convolutions and bandwidth-bound norms whatever the average says; the averaged intensity and
the ridge are still what the evidence states.

Only CUDA runs on a card the catalog knows get a verdict: a CPU's roofs are not in any
datasheet (tune measures them, which a run must not spend time on).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.run.probe.op_costs import OpCosts
from trainmedic.run.report.model import DeviceInfo


@dataclass(frozen=True)
class Bound:
    """Where the counted steps sit under the device's roofs."""

    device: str
    precision: str
    #: FLOP per byte over the counted steps (all ops, unfused bytes).
    intensity: float
    #: The intensity where ``precision``'s compute roof meets the bandwidth slope.
    ridge: float
    #: Share of the roofline time spent in ops under the bandwidth slope.
    bandwidth_share: float
    flops_per_step: float
    bytes_per_step: float

    @property
    def bandwidth_bound(self) -> bool:
        return self.bandwidth_share >= 0.5

    def evidence(self) -> str:
        return (
            f"arithmetic intensity {self.intensity:.2g} FLOP/byte "
            f"({self.flops_per_step / 1e9:.3g} GFLOP and {self.bytes_per_step / 1e9:.3g} GB per step, counted over "
            f"the census steps) against the {self.device}'s {self.precision} ridge point of {self.ridge:.0f} FLOP/byte; "
            f"{self.bandwidth_share:.0%} of the roofline time is in bandwidth-bound ops"
        )


def judge(costs: OpCosts, device: DeviceInfo) -> Bound | None:
    """The roofline verdict of a CUDA run's counted ops, or None when there is none to give."""
    if device.kind != "cuda" or not costs.ops or costs.steps <= 0:
        return None
    try:
        from trainmedic.roofline.model import StepCost
        from trainmedic.roofline.place import catalog_ceilings, roofline
    except Exception:  # noqa: BLE001 - a run's report never fails for a missing roofline
        return None
    ceilings = catalog_ceilings(device.name)
    if ceilings is None:
        return None
    flops_by_precision: dict[str, float] = {}
    for (_, precision, flops, _), count in costs.ops.items():
        flops_by_precision[precision] = flops_by_precision.get(precision, 0.0) + flops * count
    # The precision that does the arithmetic sets the compute roof (tune does the same: the
    # configuration's precision, whatever its elementwise ops run in).
    precision = max(flops_by_precision, key=lambda p: flops_by_precision[p], default="fp32")
    if ceilings.peak(precision) is None:
        precision = "fp32"
    flops = sum(f * n for (_, _, f, _), n in costs.ops.items()) / costs.steps
    moved = sum(b * n for (_, _, _, b), n in costs.ops.items()) / costs.steps
    if moved <= 0:
        return None
    cost = StepCost(
        batch_size=1,
        precision=precision,
        flops=flops,
        bytes=moved,
        # n identical ops sit under the same roof as one op n times the size.
        ops=tuple((f * n / costs.steps, b * n / costs.steps) for (_, _, f, b), n in costs.ops.items()),
    )
    placed = roofline(cost, ceilings, precision, step_seconds=1.0)
    if placed is None or placed.bandwidth_share is None:
        return None
    return Bound(
        device=device.name,
        precision=precision,
        intensity=placed.intensity,
        ridge=placed.ridge,
        bandwidth_share=placed.bandwidth_share,
        flops_per_step=flops,
        bytes_per_step=moved,
    )
