"""``trainmedic plan --verify`` / ``--verify-trace``: the options checked, then the plan made and verified.

``--verify`` runs two steps of the build for real on this machine's GPU (``plan.verify``) and
compares; ``--verify-trace TRACE`` compares with a step recorded earlier (by ``--verify
--record TRACE`` or ``benchmarks/plan_gpu.py``), on any machine. ``trainmedic.plan.console``
renders the comparison.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

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
            precision=options.precision
            if options.precision is not None
            else str(result.get("precision", "fp32")),
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
        cap = (
            parse_capacity(options.capacity) if options.capacity is not None else None
        )  # a smaller card on this one
        recorded = record_on_gpu(
            options.spec,
            options.batch,
            options.precision,
            options.record,
            cap_bytes=cap,
            spec_args=options.spec_args,
        )
    plan, verification = verified_plan(
        options.spec,
        options.batch,
        device=options.device,
        capacity=options.capacity,
        precision=options.precision,
        headroom=options.headroom,
        recorded=recorded,
        source=source,
        spec_args=options.spec_args,
    )
    if answer is not None:
        plan = dataclasses.replace(
            plan,
            max_batch=answer.max_batch,
            bytes_per_sample=answer.bytes_per_sample,
            notes=answer.notes,
            warnings=answer.warnings,
        )
    return plan, verification


def _local_gpu() -> dict:
    """This machine's GPU for a --verify with no --device: its catalog key, or its memory."""
    import torch

    from trainmedic.devices import get_device
    from trainmedic.errors import DeviceError

    try:
        return {"device": get_device(torch.cuda.get_device_name(0)).key}
    except DeviceError:
        return {"capacity": str(torch.cuda.get_device_properties(0).total_memory)}


__all__ = ["make_verified_plan", "verify_problem"]
