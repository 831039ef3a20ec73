"""Before the GPU run: whether the full run fits a session (the memory plan is memory_plan.py's).

The speed is the declared ``step_time`` (seconds per step measured on the target), else the tiny
run's own CPU speed, counted by the child's optimizer-step hook; the CPU speed is said to be
that, never passed off as the GPU's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from pathlib import Path

from trainmedic.preflight.declarations import Experiment
from trainmedic.preflight.events import Save
from trainmedic.preflight.model import SessionEstimate
from trainmedic.units import format_duration, format_seconds

#: Time kept free at the end of a session for the last save and the platform's own shutdown:
#: 15 minutes (a 9h Kaggle session -> deadline 8h45m), at most a tenth of a short session.
SESSION_MARGIN = 15 * 60.0


def cpu_step_time(timeline: Path, saves: Iterable[Save] = ()) -> float | None:
    """Median seconds per optimizer step of the tiny run, save time taken out; None below 3 steps.

    The first interval (lazy init, first allocations) is dropped; the median ignores the odd slow
    step. In preflight mode every save() writes, so the time spent in saves (the Checkpointer's
    save events carry their start and end on the same clock) is subtracted from the interval it
    fell in: the full run saves rarely.
    """
    times = _main_optimizer_steps(timeline)
    if len(times) < 3:
        return None
    spans = [(s.started, s.ended) for s in saves if s.started is not None and s.ended is not None]
    intervals = []
    for start, end in zip(times[1:], times[2:]):
        in_saves = sum(min(end, b) - max(start, a) for a, b in spans if a < end and b > start)
        intervals.append(max(end - start - in_saves, 0.0))
    return statistics.median(intervals)


def optimizer_steps(timeline: Path) -> int | None:
    """Optimizer steps the run took (its main optimizer's); None when it took none (no torch, or
    no ``optimizer.step()`` yet): a stuck run's progress when its loop has no counter to read."""
    return len(_main_optimizer_steps(timeline)) or None


def _main_optimizer_steps(timeline: Path) -> list[float]:
    """The step times of the optimizer that stepped most often (the main one; a GAN's two step
    alike), from the child's "step <optimizer id> <t>" lines; [] without any."""
    steps: dict[str, list[float]] = {}
    try:
        lines = timeline.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        try:
            if len(parts) == 3 and parts[0] == "step":
                steps.setdefault(parts[1], []).append(float(parts[2]))
        except ValueError:
            continue
    return max(steps.values(), key=len) if steps else []


def session_estimate(
    experiment: Experiment, session_limit: float | None, cpu_step: float | None
) -> SessionEstimate | None:
    if experiment.steps is None:
        return None
    steps = experiment.steps
    if experiment.step_time is not None:
        step_time, source = experiment.step_time, "target"
        speed = f"{format_seconds(step_time)} per step (step_time, measured on the target)"
    elif cpu_step is not None:
        step_time, source = cpu_step, "cpu"
        speed = (
            f"{format_seconds(step_time)} per step (the CPU speed of this tiny run, not the target GPU's: "
            "declare step_time measured there)"
        )
    else:
        return SessionEstimate(
            steps,
            None,
            None,
            None,
            session_limit,
            message=f"full run of {steps} steps: no speed to estimate it with (the tiny run made no optimizer "
            'steps trainmedic could count); declare step_time = "0.6s" measured on the target GPU',
        )
    total = steps * step_time
    head = f"full run: {steps} steps x {speed} = {format_duration(total)}"
    estimate = SessionEstimate(steps, step_time, source, total, session_limit)
    if session_limit is None:
        estimate.message = head
        return estimate
    deadline = session_limit - min(SESSION_MARGIN, session_limit / 10)
    if total <= deadline:
        estimate.fits, estimate.sessions = True, 1
        estimate.message = f"{head}: fits a {format_duration(session_limit)} session"
        return estimate
    estimate.fits, estimate.sessions, estimate.deadline = False, math.ceil(total / deadline), deadline
    estimate.message = (
        f"{head}: needs {estimate.sessions} sessions of {format_duration(session_limit)}: "
        f"pass deadline='{format_duration(deadline)}' to checkpoint.Checkpointer and resume in the next session"
    )
    return estimate


def format_budget(seconds: float) -> str:
    """``20s``, ``2m``, ``1h30m``: a budget as the user wrote it in pyproject.toml."""
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9:
        return format_seconds(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole % 60 == 0 and whole < 3600:
        return f"{whole // 60}m"
    return format_duration(seconds)
