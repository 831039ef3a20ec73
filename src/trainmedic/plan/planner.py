"""``plan_memory``: trace, replay through the target's allocator, break down, name the hotspots."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from trainmedic.devices import Device, get_device
from trainmedic.errors import PlanError
from trainmedic.plan.from_trace import plan_from_trace
from trainmedic.plan.model import Plan
from trainmedic.plan.scaling import other_batch
from trainmedic.plan.solver import solve_max_batch
from trainmedic.plan.trace import PRECISIONS, Trace, trace_step
from trainmedic.units import format_bytes, parse_bytes

#: The share of the card a plan keeps free by default, as tune does: other processes, the
#: allocator's fragmentation under pressure and a driver's own use take some of it.
DEFAULT_HEADROOM = 0.1


def plan_memory(
    build: Callable[[int], Any],
    batch_size: int | None = None,
    *,
    device: str | Device | None = None,
    capacity: int | str | None = None,
    precision: str = "fp32",
    headroom: float = DEFAULT_HEADROOM,
    max_batch: bool = False,
    measure_growth: bool = True,
) -> Plan:
    """Plan the peak memory of one training step of ``build(batch_size)`` on ``device``.

    ``device``: a catalog key ("t4", "h100", "cpu"...) or a Device. ``capacity`` (bytes, or
    ``"48GiB"``) overrides the device's memory; without a device it stands for a GPU that is not
    in the catalog (planned like an sm80 card), as ``--capacity`` alone does. With neither, the
    plan is for the CPU itself. With ``max_batch=True`` the plan also solves for the largest batch that
    fits ``capacity × (1 − headroom)``; without a ``batch_size`` the plan is made at that batch.
    ``measure_growth`` traces the step at a second batch (half this one) to measure how each
    hotspot grows with the batch, which its advice follows; a caller that reads only the numbers
    can skip it.
    """
    target = resolve_device(device, capacity)
    capacity_bytes = resolve_capacity(target, capacity)
    check_headroom(headroom)
    if precision not in PRECISIONS:
        raise PlanError(
            f"precision={precision!r} is not one of {', '.join(PRECISIONS)}; e.g. precision='bf16'."
        )
    if batch_size is None and not max_batch:
        raise PlanError(
            "give a batch size to plan (--batch N), or ask for the largest that fits (--max-batch)."
        )
    if batch_size is not None:
        check_batch(batch_size)
    if precision == "bf16" and target.is_gpu and "bf16" not in target.peak_flops:
        # Memory is planned as asked; the warning is about what the card can run fast.
        warning = f"{target.name} has no bf16 tensor cores: bf16 autocast runs slowly there; fp16 with a GradScaler is its mixed precision"
    else:
        warning = None
    plan = _plan(build, batch_size, target, capacity_bytes, precision, headroom, max_batch, measure_growth)
    if warning:
        plan.warnings.append(warning)
    if max_batch and headroom == 0 and target.is_gpu:
        plan.warnings.append(
            "no headroom kept (--headroom 0): the largest batch leaves nothing for other processes, the driver or the "
            "allocator's fragmentation under pressure; it may not fit. --headroom 0.1 keeps 10 % free"
        )
    return plan


def _plan(
    build,
    batch_size,
    target: Device,
    capacity_bytes: int,
    precision: str,
    headroom: float,
    max_batch: bool,
    measure_growth: bool,
) -> Plan:
    if not max_batch:
        trace = trace_step(build, batch_size, target, precision)
        notes: list[str] = []
        companion = _companion(build, trace, {}, target, precision, notes) if measure_growth else None
        plan = plan_from_trace(trace, target, capacity_bytes, precision, headroom, companion)
        plan.notes.extend(notes)
        return plan

    solution = solve_max_batch(build, target, capacity_bytes, precision, headroom)
    at = batch_size if batch_size is not None else max(1, solution.max_batch or 1)
    planned = solution.plans.get(at)
    growth_notes: list[str] = []
    if planned is None or measure_growth:
        trace = solution.traces.get(at) or trace_step(build, at, target, precision)
        companion = (
            _companion(build, trace, solution.traces, target, precision, growth_notes)
            if measure_growth
            else None
        )
        planned = plan_from_trace(trace, target, capacity_bytes, precision, headroom, companion)
    plan = dataclasses.replace(
        planned, max_batch=solution.max_batch, bytes_per_sample=solution.bytes_per_sample
    )
    plan.notes = plan.notes + solution.notes + growth_notes
    if (
        plan.margin and solution.max_batch and plan.confidence is not None
    ):  # a margin comes with its confidence
        plan.notes.append(
            f"max batch keeps {plan.margin:.0%} of the need in reserve for the plan's own error ({plan.confidence.level})"
        )
    return plan


def _companion(
    build, trace: Trace, traced: dict[int, Trace], target: Device, precision: str, notes: list[str]
) -> Trace | None:
    """The step at a second batch, to measure how each hotspot grows: a neighbour already traced
    (the max-batch search's), else half this batch."""
    if trace.incomplete:
        return None
    others = [b for b, t in traced.items() if b != trace.batch_size and not t.incomplete]
    if others:
        return traced[min(others, key=lambda b: (abs(b - trace.batch_size), b))]
    other = other_batch(trace.batch_size)
    try:
        companion = trace_step(build, other, target, precision)
    except PlanError as exc:
        notes.append(
            f"how the hotspots grow with the batch is read off their shapes: the step at batch {other} failed ({exc})"
        )
        return None
    return None if companion.incomplete else companion


def resolve_device(device: str | Device | None, capacity: int | str | None) -> Device:
    if isinstance(device, Device):
        return device
    if device is None:
        return get_device("cpu") if capacity is None else custom_device(parse_capacity(capacity))
    return get_device(device)


def custom_device(capacity_bytes: int) -> Device:
    """A GPU known only by its capacity: planned like an sm80 card with an Ampere-sized context."""
    ampere = get_device("a100-80gb")
    return dataclasses.replace(
        ampere,
        key="custom",
        name=f"a GPU of {format_bytes(capacity_bytes)}",
        memory_bytes=capacity_bytes,
        memory_source="given",
    )


def resolve_capacity(device: Device, capacity: int | str | None) -> int:
    if capacity is None:
        if device.is_gpu:
            return device.memory_bytes
        import psutil

        return int(psutil.virtual_memory().total)
    return parse_capacity(capacity)


def parse_capacity(capacity: int | str) -> int:
    value = capacity
    if isinstance(value, str):
        try:
            value = parse_bytes(value)
        except ValueError as exc:
            raise PlanError(f"capacity {capacity!r} is not a size: {exc}") from exc
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(
            f"capacity={capacity!r} is not a positive size; give bytes or a size such as '48GiB'."
        )
    return value


def check_batch(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PlanError(
            f"batch size {batch_size!r} cannot be planned: expected a whole number of samples >= 1 (e.g. --batch 32)."
        )


def check_headroom(headroom: Any) -> None:
    if not isinstance(headroom, (int, float)) or isinstance(headroom, bool) or not 0.0 <= headroom < 1.0:
        raise PlanError(
            f"headroom={headroom!r} is not a share of the card in [0, 1); e.g. --headroom 0.1 keeps 10 % free."
        )
