"""``trainmedic plan --verify`` / ``--verify-trace``: the plan held against a real step, rendered.

``--verify`` runs two steps of the build for real on this machine's GPU (``plan.verify``) and
compares; ``--verify-trace TRACE`` compares with a step recorded earlier (by ``--verify
--record TRACE`` or ``benchmarks/plan_gpu.py``), on any machine. The table says planned against
measured peak and reserved memory, where each peak fell, and the first place the planned
allocations part from the card's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from trainmedic.units import format_bytes

#: plan.confidence's level of a plan that is a floor (named here: importing plan loads torch).
LOWER_BOUND = "lower bound"

if TYPE_CHECKING:
    from trainmedic.plan import Plan
    from trainmedic.plan.verify import Verification


def verify_problem(options) -> str | None:
    """A one-line reason ``--verify`` cannot run as asked, found before any trace."""
    if options.verify and options.verify_trace is not None:
        return "give --verify (run the step on this machine's GPU) or --verify-trace TRACE (compare with a recording), not both"
    if options.record is not None and not options.verify:
        return "--record keeps the recording of --verify; add --verify"
    if options.verify_trace is not None and options.max_batch:
        return "--verify-trace checks the batch it recorded; --max-batch's answer is checked on the card with --verify"
    if options.verify and options.batch is None and not options.max_batch:
        return "give the batch to verify with --batch N (or --max-batch: its answer is then run on the card)"
    if options.verify_trace is not None and not options.verify_trace.is_file():
        return f"--verify-trace {options.verify_trace}: no such file; give a gpu-alloc-trace/1 file (.json or .json.gz)"
    if options.verify:
        from trainmedic.plan.verify import gpu_problem

        return gpu_problem()
    return None


def make_verified_plan(options, make_plan: Callable) -> tuple[Plan, Verification]:
    """The plan of ``options``, verified against a real step of the same batch and precision."""
    from trainmedic.plan.planner import parse_capacity
    from trainmedic.plan.recorded import load_recorded
    from trainmedic.plan.verify import record_on_gpu, recorded_card, verified_plan

    if options.verify_trace is not None:
        recorded = load_recorded(options.verify_trace)
        # What the recording is of fills what the command line left out.
        result = recorded.result
        options = dataclasses.replace(
            options,
            batch=options.batch if options.batch is not None else result.get("batch"),
            precision=options.precision if options.precision is not None else str(result.get("precision", "fp32")),
        )
        if options.device is None and options.capacity is None:
            card = recorded_card(result)
            if card is not None:
                options = dataclasses.replace(options, device=card)
            elif result.get("memory_bytes"):  # a card the catalog lacks: planned by its memory
                options = dataclasses.replace(options, capacity=str(result["memory_bytes"]))
        source = str(options.verify_trace)
    else:
        recorded, source = None, "this machine's GPU"
        options = dataclasses.replace(options, precision=options.precision or "fp32")
        if options.device is None and options.capacity is None:
            options = dataclasses.replace(options, **_local_gpu())
    if options.max_batch:
        # Verify the answer: plan the largest batch first, then check that batch on the card.
        answer = make_plan(options)
        options = dataclasses.replace(options, batch=answer.batch_size, max_batch=False)
    else:
        answer = None
    if recorded is None:
        cap = parse_capacity(options.capacity) if options.capacity is not None else None  # a smaller card on this one
        recorded = record_on_gpu(options.spec, options.batch, options.precision, options.record, cap_bytes=cap)
    plan, verification = verified_plan(options.spec, options.batch, device=options.device, capacity=options.capacity,
                                       precision=options.precision, headroom=options.headroom, recorded=recorded, source=source)
    if answer is not None:
        plan = dataclasses.replace(plan, max_batch=answer.max_batch, bytes_per_sample=answer.bytes_per_sample,
                                   notes=answer.notes, warnings=answer.warnings)
    return plan, verification


def within_bound(verification: Verification, plan: Plan) -> bool:
    """Whether the card agreed with the plan as far as the plan claimed: within its bound, or,
    for a lower bound, at or above it; a run out of memory never agrees."""
    if verification.recorded.out_of_memory:
        return False
    comparison = verification.comparison
    if plan.confidence is None or plan.confidence.level == LOWER_BOUND:
        return comparison.peak_error <= 0
    bound = plan.confidence.bound
    return abs(comparison.peak_error) <= bound.peak and abs(comparison.reserved_error) <= bound.reserved


def render_verification(verification: Verification, plan: Plan, console: Console) -> None:
    c = verification.comparison
    result = verification.recorded.result
    title = Text(f"\nVerified against two real steps on {verification.device}", style="bold")
    if result.get("torch"):
        title.append(f" (torch {result['torch']})")
    if verification.source != "this machine's GPU":
        title.append(f", recorded in {verification.source}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column, justify in (("", "left"), ("planned", "right"), ("measured", "right"), ("error", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    table.add_row("  peak allocated", format_bytes(c.planned.bytes), format_bytes(c.recorded.bytes), f"{c.peak_error:+.1%}")
    table.add_row("  peak reserved", format_bytes(c.planned.reserved), format_bytes(c.recorded.reserved), f"{c.reserved_error:+.1%}")
    table.add_row("  peak in", f"step {c.planned.step}, {c.planned.phase}", f"step {c.recorded.step}, {c.recorded.phase}", "")
    parts = [title, table]
    if verification.recorded.out_of_memory:
        parts.append(Text(f"the card ran out of memory: {result.get('error', 'torch.OutOfMemoryError')}", style="bold red"))
    if c.divergence is None:
        parts.append(Text("first divergence: none; every allocation of 1 MiB or more matches the card's, in order", style="green"))
    else:
        parts.append(Text(f"first divergence: {c.divergence.describe()}"))
    agreed = within_bound(verification, plan)
    if plan.confidence is None or plan.confidence.level == LOWER_BOUND:
        text = "the plan is a lower bound and the card's peak is at or above it" if agreed else \
            "the card's peak is BELOW the plan's lower bound: please report it with the trace"
    else:
        bound = plan.confidence.bound
        text = f"within the plan's own bound ({bound.peak:.0%} peak, {bound.reserved:.0%} reserved)" if agreed else \
            f"OUTSIDE the plan's own bound ({bound.peak:.0%} peak, {bound.reserved:.0%} reserved): please report it with the trace"
    parts.append(Text(text, style="green" if agreed else "bold red"))
    console.print(Group(*parts))


def _local_gpu() -> dict:
    """This machine's GPU for a --verify with no --device: its catalog key, or its memory."""
    import torch

    from trainmedic.devices import get_device
    from trainmedic.errors import DeviceError

    try:
        return {"device": get_device(torch.cuda.get_device_name(0)).key}
    except DeviceError:
        return {"capacity": str(torch.cuda.get_device_properties(0).total_memory)}


__all__ = ["make_verified_plan", "render_verification", "verify_problem", "within_bound"]
