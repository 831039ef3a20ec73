"""A device's datasheet roofs and the per-op roofline of a measured step."""

from __future__ import annotations

from trainmedic.devices import get_device
from trainmedic.errors import DeviceError, TuneError
from trainmedic.roofline.model import Ceilings, Roofline, StepCost


def catalog_ceilings(name: str) -> Ceilings | None:
    """Datasheet roofs of the card ``name`` (as ``torch.cuda.get_device_name`` says it), or None
    when the catalog does not know it (or knows no peak for it): then measure instead."""
    try:
        entry = get_device(name)
    except DeviceError:
        return None
    if not entry.is_gpu or not entry.peak_flops or entry.bandwidth_bytes_per_s <= 0:
        return None
    return Ceilings(entry.name, dict(entry.peak_flops), entry.bandwidth_bytes_per_s, "catalog")


def roofline(cost: StepCost, ceilings: Ceilings, precision: str, step_seconds: float) -> Roofline | None:
    """Where a step of ``cost`` that took ``step_seconds`` sits under ``ceilings``' roofs.

    ``tf32`` (fp32 storage, TF32 matmuls) runs under the tf32 roof, or the fp32 one on a device
    without TF32 (every CPU). None when the device has no roof for ``precision`` (fp16 on a
    P100-era card without tensor cores is still listed; bf16 on a T4 is not) or no bandwidth.
    """
    if not step_seconds > 0:
        raise TuneError(f"step time {step_seconds!r} s must be positive to place a step under the roofline.")
    peak = ceilings.peak(precision)
    if peak is None and precision == "tf32":
        peak = ceilings.peak("fp32")
    if peak is None or peak <= 0 or ceilings.bandwidth_bytes_per_s <= 0:
        return None
    bandwidth = ceilings.bandwidth_bytes_per_s
    under_bandwidth = under_compute = 0.0
    for flops, moved in cost.ops:
        # Each op takes at least the longer of its two times; which one is longer says which
        # roof it sits under.
        compute_s, memory_s = flops / peak, moved / bandwidth
        if memory_s >= compute_s:
            under_bandwidth += memory_s
        else:
            under_compute += compute_s
    predicted = under_bandwidth + under_compute
    return Roofline(
        flops_per_step=cost.flops,
        bytes_per_step=cost.bytes,
        peak_flops=peak,
        bandwidth_bytes_per_s=bandwidth,
        achieved_flops=cost.flops / step_seconds,
        step_s=step_seconds,
        roofline_s=predicted if cost.ops else None,
        bandwidth_share=under_bandwidth / predicted if predicted > 0 else None,
    )
