"""The largest batch that fits, from a memory model fitted to a few traces: no OOM, no halving.

Peak memory is affine in the batch size over long stretches (parameters, gradients and
optimizer state are fixed; activations grow linearly), with a kink where the peak moves from the
optimizer step to the backward pass. So: trace two small batches, solve the line for the
capacity, trace the answer to confirm it, and refit on the two traces that bracket the limit
(regula falsi) until the answer fits and the next batch is traced not to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainmedic.devices import Device
from trainmedic.plan.from_trace import plan_from_trace
from trainmedic.plan.model import Plan
from trainmedic.plan.trace import Trace, trace_step
from trainmedic.units import format_bytes

FIRST = (1, 8)
MAX_TRACES = 32
#: A bracket this narrow (batches, or a share of the answer) is bisected: within it the need is
#: flat between the allocator's segment steps.
NARROW_MIN = 8
NARROW_SHARE = 0.01
#: A batch beyond this is not a batch: the memory does not grow with it.
CEILING = 1 << 24


@dataclass
class Solution:
    max_batch: int | None
    bytes_per_sample: float | None
    plans: dict[int, Plan] = field(default_factory=dict)
    #: The traces behind them: the plan at the answer pairs its tensors with a neighbour's to
    #: measure how each hotspot grows (plan/scaling.py).
    traces: dict[int, Trace] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Whether each traced candidate fitted, in order: two on the same side means the line is
    #: bending (allocator rounding, a moving peak) and the next candidate is the bracket's middle.
    sides: list[bool] = field(default_factory=list)
    #: The last candidate was the batch after the best, taken on the fit's word: the next
    #: same-side pair bisects, so a fit that keeps undershooting cannot creep one batch a trace.
    confirmed: bool = False


def solve_max_batch(
    build: Callable[[int], Any], device: Device, capacity_bytes: int, precision: str, headroom: float
) -> Solution:
    solution = Solution(None, None)
    limit = int(capacity_bytes * (1.0 - headroom))

    def need(batch: int) -> int:
        # What must fit: the floor (cuDNN gives up its largest workspaces before an OOM) plus a
        # margin for the plan's own error, as far as the recorded cases bound it.
        if batch not in solution.plans:
            trace = solution.traces[batch] = trace_step(build, batch, device, precision)
            solution.plans[batch] = plan_from_trace(trace, device, capacity_bytes, precision, headroom)
        return solution.plans[batch].required_bytes

    if need(FIRST[0]) > limit:
        solution.max_batch = 0
        solution.notes.append(
            f"even batch 1 needs {format_bytes(need(1))}, more than the {format_bytes(limit)} usable: "
            "shrink the model, use bf16, or an optimizer with less state"
        )
        return solution
    need(FIRST[1])
    while len(solution.plans) < MAX_TRACES:
        fits = [b for b in solution.plans if need(b) <= limit]
        fails = [b for b in solution.plans if need(b) > limit]
        best, over = max(fits), min(fails) if fails else None
        if over is not None and over == best + 1:
            break
        candidate = _next_candidate(solution, best, over, limit, need)
        if candidate is None:
            solution.notes.append(
                f"peak memory does not grow with the batch up to {best}; any batch size fits"
            )
            return solution
        if candidate in solution.plans:
            break
        solution.sides.append(need(candidate) <= limit)
    fits = [b for b in solution.plans if need(b) <= limit]
    if max(fits) >= CEILING:
        solution.notes.append(
            f"no limit found up to batch {CEILING:,}: peak memory barely grows with the batch"
        )
        return solution
    solution.max_batch = max(fits)
    fails = [b for b in solution.plans if need(b) > limit]
    if not fails or min(fails) != solution.max_batch + 1:
        solution.notes.append(
            f"batch {solution.max_batch} is the largest traced to fit; batch {solution.max_batch + 1} was not traced"
        )
    lo, hi = sorted(solution.plans)[0], sorted(solution.plans)[-1]
    solution.bytes_per_sample = (need(hi) - need(lo)) / (hi - lo) if hi > lo else None
    traced = ", ".join(str(b) for b in sorted(solution.plans))
    solution.notes.append(
        f"max batch from {len(solution.plans)} traces (batch {traced}); "
        f"about {format_bytes(solution.bytes_per_sample or 0)} more per sample"
    )
    return solution


def _next_candidate(
    solution: Solution, best: int, over: int | None, limit: int, need: Callable[[int], int]
) -> int | None:
    traced = sorted(solution.plans)
    if over is None:
        a, b = traced[-2], traced[-1]
        if need(b) <= need(a):  # flat so far: the peak is not in the batch-sized part yet
            return None if b >= CEILING else min(CEILING, b * 8)
    narrow = over is not None and over - best <= max(NARROW_MIN, best * NARROW_SHARE)
    bending = len(solution.sides) >= 2 and solution.sides[-1] == solution.sides[-2]
    if over is not None and bending and not narrow and not solution.confirmed:
        # Two fits landed on the fitting side, the last one right under the limit the fit puts
        # just past it: trace the next batch, which ends the search when it does not fit
        # (a pairwise cost on a T4: 89 and 90 fitted, and the middle of 90..354 cost one trace more).
        fitted = _solve_fit(solution, best, over, limit, need)
        if fitted <= best + 1:
            solution.confirmed = True
            return best + 1
    solution.confirmed = False
    if over is not None and (narrow or bending):
        # Near the limit the need is a staircase (the allocator grows in 2 MiB segments), which
        # no fitted curve resolves; and a fit that keeps landing on one side is bending. The
        # middle of the bracket settles both in a few traces.
        candidate = (best + over) // 2
    else:
        candidate = _solve_fit(solution, best, over, limit, need)
    candidate = max(best + 1, candidate)
    if over is not None:
        candidate = min(candidate, over - 1)
    return min(candidate, CEILING)


def _solve_fit(
    solution: Solution, best: int, over: int | None, limit: int, need: Callable[[int], int]
) -> int:
    """The largest batch a fitted memory model puts under the limit.

    A quadratic through the three traces nearest the limit: activations grow linearly with the
    batch, but a pairwise cost over the batch (a Sinkhorn transport cost) grows with its square.
    """
    anchor = best if over is None else (best + over) / 2
    nearest = sorted(solution.plans, key=lambda b: abs(b - anchor))[:3]
    xs = np.array(nearest, dtype=float)
    ys = np.array([need(b) for b in nearest], dtype=float)
    degree = 2 if len(nearest) == 3 else 1
    coefficients = np.polyfit(xs, ys, degree)
    if degree == 2 and coefficients[0] <= 0:
        coefficients = np.polyfit(xs, ys, 1)  # bending down: trust only the slope
    coefficients[-1] -= limit
    roots = [r.real for r in np.roots(coefficients) if abs(r.imag) < 1e-9 and r.real > best]
    if not roots:
        return best + 1
    return int(min(roots))
