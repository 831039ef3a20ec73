"""A plan from a traced step: the allocator's replay, its phases and categories, the card's margins.

``plan_memory`` (``planner``) traces one batch size; ``solve_max_batch`` (``solver``) traces
several; both turn each trace into a Plan here.
"""

from __future__ import annotations

from trainmedic.devices import Device
from trainmedic.plan.allocator import replay
from trainmedic.plan.confidence import confidence_of
from trainmedic.plan.hotspots import find_hotspots
from trainmedic.plan.model import Breakdown, Plan
from trainmedic.plan.optimizer_state import analytic_state_bytes
from trainmedic.plan.scaling import Growth, growth_of, twins
from trainmedic.plan.trace import Trace
from trainmedic.units import format_bytes


def plan_from_trace(
    trace: Trace,
    device: Device,
    capacity_bytes: int,
    precision: str,
    headroom: float,
    companion: Trace | None = None,
) -> Plan:
    """``companion``: the same step traced at another batch, which measures how each hotspot grows
    with the batch (``plan/scaling.py``); without it that is read off the shapes."""
    events = trace.events
    if device.is_gpu and trace.host_only:
        events = [e for e in events if e[1] not in trace.host_only]
    result = replay(events, trace.allocations, cuda=device.is_gpu)
    # cuDNN's convolution workspaces shrink when memory is short; without them is the floor.
    elastic = {sid for sid, _ in trace.conv_passes if sid is not None}
    without = (
        replay([e for e in events if e[1] not in elastic], trace.allocations, cuda=True) if elastic else None
    )
    sums = dict.fromkeys(("parameters", "gradients", "optimizer_state", "activations", "temporaries"), 0)
    for sid, nbytes in result.live_at_peak.items():
        sums[_category(sid, trace)] += nbytes
    notes, warnings = list(trace.notes), list(trace.warnings)
    peak, reserved = result.peak_allocated, result.peak_reserved
    if trace.incomplete:
        # The step stopped at an op fake tensors cannot run: what is exact stays exact, the rest
        # is what was traced before that op, so the plan is a floor and says so.
        sums["gradients"] = max(sums["gradients"], trace.trainable_bytes)
        sums["optimizer_state"] = max(sums["optimizer_state"], analytic_state_bytes(trace))
        floor = sum(sums.values())
        peak, reserved = max(peak, floor), max(reserved, floor)
        warnings.append(
            f"the step could not be traced past {trace.incomplete}; parameters, gradients and optimizer state are "
            f"counted exactly, activations only up to that op: {format_bytes(peak)} is a lower bound"
        )
    breakdown = Breakdown(**sums, cuda_context=device.cuda_context_bytes if device.is_gpu else 0)
    exclude = trace.parameters | trace.gradients | trace.optimizer_state
    growths = _growths(trace, companion, result.live_at_peak) if companion is not None else None
    hotspots = find_hotspots(
        result.live_at_peak,
        trace.allocations,
        exclude,
        trace.batch_size,
        peak,
        growths,
        trace.sizes,
        precision,
    )
    confidence = confidence_of(device.key, device.is_gpu, trace.estimates, trace.incomplete)
    return Plan(
        device=device.key,
        capacity_bytes=capacity_bytes,
        batch_size=trace.batch_size,
        precision=precision,
        peak_bytes=peak,
        breakdown=breakdown,
        reserved_bytes=reserved,
        headroom=headroom,
        hotspots=hotspots,
        notes=notes,
        warnings=warnings,
        exact=trace.incomplete is None,
        floor_reserved_bytes=without.peak_reserved if without is not None else None,
        confidence=confidence,
        margin=confidence.margin,
    )


def _growths(trace: Trace, companion: Trace, live: dict[int, int]) -> dict[int, Growth]:
    paired = twins(trace.allocations, companion.allocations)
    found = {}
    for sid in live:
        growth = growth_of(trace.allocations[sid], paired.get(sid), trace.batch_size, companion.batch_size)
        if growth is not None:
            found[sid] = growth
    return found


def _category(sid: int, trace: Trace) -> str:
    if sid in trace.parameters:
        return "parameters"
    if sid in trace.gradients:
        return "gradients"
    if sid in trace.optimizer_state:
        return "optimizer_state"
    if sid in trace.saved or sid in trace.inputs:
        return "activations"
    return "temporaries"
