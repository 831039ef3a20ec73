"""A plan held against a recorded step: the peaks, the phase each falls in, what is live there,
and the first place the planned allocations part from the recorded ones.

Both sides are sequences of allocs and frees with their step and phase. The planner's come from
its trace (the build's allocations are what the recording calls ``before_step_bytes``); the
card's from ``plan.recorded``. Per step and phase the two sequences of events at least
``min_bytes`` large are aligned (``difflib``); the first stretch that differs is the divergence
a wrong model of the GPU shows first.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from trainmedic.plan.allocator import CachingAllocatorModel, round_size
from trainmedic.plan.recorded import PHASES, Event, RecordedStep
from trainmedic.plan.trace import Trace
from trainmedic.units import format_bytes

#: Events smaller than this are left out of the alignment: scalars and norms' statistics move
#: with library versions and say nothing about where the memory goes.
MIN_BYTES = 1 << 20
#: How many differing events a divergence shows from each side.
SHOWN = 3


@dataclass(frozen=True)
class Divergence:
    """The first stretch of events where the plan and the card differ."""

    step: int
    phase: str
    matched: int  # events of this step and phase that agreed before it
    recorded: tuple[str, ...]  # what the card did there: "alloc 128.0 MiB", ...
    planned: tuple[str, ...]  # what the plan did there instead
    recorded_where: str = ""  # the card's stack at the first differing event
    planned_where: str = ""  # the planner's op and line at the first differing event
    largest: int = 0  # bytes of the largest event in the differing stretch, on either side

    def describe(self) -> str:
        card = ", ".join(self.recorded) or "nothing"
        plan = ", ".join(self.planned) or "nothing"
        text = f"step {self.step}, {self.phase}, after {self.matched} matching events: the card did {card}; the plan did {plan}"
        if self.recorded_where:
            text += f" (card at {self.recorded_where})"
        if self.planned_where:
            text += f" (plan at {self.planned_where})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "matched": self.matched,
            "recorded": list(self.recorded),
            "planned": list(self.planned),
            "recorded_where": self.recorded_where,
            "planned_where": self.planned_where,
            "largest_bytes": self.largest,
        }


@dataclass(frozen=True)
class PeakSide:
    """One side's peak: bytes, when it happened, and the blocks the step had made live then."""

    bytes: int
    reserved: int
    step: int
    phase: str
    live: tuple[int, ...]  # block sizes born in the steps and live at the peak, largest first


@dataclass
class Comparison:
    """Planned against recorded peaks, and where the planned sequence first diverges."""

    planned: PeakSide
    recorded: PeakSide
    divergence: Divergence | None
    notes: list[str] = field(default_factory=list)
    #: What the build held on the card before the first step, as planned.
    before_step_bytes: int = 0

    @property
    def peak_error(self) -> float:
        """Planned / measured − 1: negative is under-predicted, the direction that runs out of memory."""
        return self.planned.bytes / self.recorded.bytes - 1.0

    @property
    def reserved_error(self) -> float:
        return self.planned.reserved / self.recorded.reserved - 1.0

    def to_dict(self) -> dict[str, Any]:
        def side(s: PeakSide) -> dict[str, Any]:
            return {
                "peak_bytes": s.bytes,
                "reserved_bytes": s.reserved,
                "peak_step": s.step,
                "peak_phase": s.phase,
                "live_at_peak": list(s.live[:20]),
            }

        return {
            "planned": side(self.planned),
            "recorded": side(self.recorded),
            "peak_error": round(self.peak_error, 4),
            "reserved_error": round(self.reserved_error, 4),
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "notes": list(self.notes),
        }


def planned_events(trace: Trace) -> tuple[list[Event], list[Event]]:
    """The planner's trace as ``(before the step, the steps)`` events, on the GPU (host-only
    step counters left out). Steps count from the first forward; idle time joins the optimizer."""
    before: list[Event] = []
    steps: list[Event] = []
    # What the trace frees after its last step is the trace ending, not a step of training.
    last_idle = max((i for i, phase in trace.phase_marks if phase == "idle"), default=len(trace.events))
    marks = iter(trace.phase_marks + [(len(trace.events) + 1, "")])
    next_index, next_phase = next(marks)
    step, phase = 0, "build"
    for index, (kind, sid) in enumerate(trace.events[:last_idle]):
        while index >= next_index:
            if next_phase == "forward":
                step += 1
            phase = next_phase
            next_index, next_phase = next(marks)
        if sid in trace.host_only:
            continue
        allocation = trace.allocations[sid]
        where = " ".join(p for p in (allocation.op, allocation.where) if p)
        shown = {"idle": "optimizer", "build": "forward"}.get(phase, phase)
        event = Event(kind, allocation.nbytes, sid, step, shown, where)
        (before if step == 0 else steps).append(event)
    return before, steps


def before_step_bytes(trace: Trace) -> int:
    """What the build holds on the card before the first step: parameters, buffers and inputs."""
    before, _ = planned_events(trace)
    model = CachingAllocatorModel()
    blocks: dict[int, Any] = {}
    for event in before:
        _apply(model, blocks, event)
    return model.allocated


def compare(trace: Trace, recorded: RecordedStep, min_bytes: int = MIN_BYTES) -> Comparison:
    """Hold the planner's trace of a step against the card's recording of the same build."""
    before, steps = planned_events(trace)
    model = CachingAllocatorModel()
    blocks: dict[int, Any] = {}
    for event in before:
        _apply(model, blocks, event)
    before_bytes = model.allocated
    planned = _peak(model, blocks, steps, 0)
    real = _peak(CachingAllocatorModel(), {}, recorded.events, recorded.before_step_bytes)
    # The recording's own counters are the truth; the replay only says when and what was live.
    real = PeakSide(recorded.peak_bytes, recorded.reserved_bytes, real.step, real.phase, real.live)
    divergence = first_divergence(recorded.events, steps, min_bytes)
    notes = []
    if recorded.out_of_memory:
        notes.append("the recorded run ran out of memory: its peak is where it stopped, not a finished step")
    return Comparison(planned, real, divergence, notes, before_bytes)


def _apply(model: CachingAllocatorModel, blocks: dict[int, Any], event: Event) -> None:
    if event.kind == "alloc":
        blocks[event.block] = model.malloc(event.nbytes)
    else:
        model.free(blocks.pop(event.block, None))


def _peak(model: CachingAllocatorModel, blocks: dict[int, Any], events: list[Event], offset: int) -> PeakSide:
    peak, at = -1, None
    live: tuple[int, ...] = ()
    born: dict[int, int] = {}
    for event in events:
        _apply(model, blocks, event)
        if event.kind == "alloc":
            if blocks.get(event.block) is not None:
                born[event.block] = round_size(event.nbytes)
            if model.allocated > peak:
                peak, at = model.allocated, event
                live = tuple(sorted(born.values(), reverse=True))
        else:
            born.pop(event.block, None)
    step, phase = (at.step, at.phase) if at is not None else (0, "forward")
    return PeakSide(peak + offset, model.reserved, step, phase, live)


def first_divergence(
    recorded: list[Event], planned: list[Event], min_bytes: int = MIN_BYTES
) -> Divergence | None:
    """The first stretch, per step and phase in order, where the two sequences of large events differ."""

    def by_part(events: list[Event]) -> dict[tuple[int, str], list[Event]]:
        parts: dict[tuple[int, str], list[Event]] = {}
        for event in events:
            if event.nbytes >= min_bytes:
                parts.setdefault((event.step, event.phase), []).append(event)
        return parts

    real, plan = by_part(recorded), by_part(planned)
    steps = sorted({step for step, _ in real} | {step for step, _ in plan})
    for step in steps:
        for phase in PHASES:
            a, b = real.get((step, phase), []), plan.get((step, phase), [])
            tokens_a = [(e.kind, round_size(e.nbytes)) for e in a]
            tokens_b = [(e.kind, round_size(e.nbytes)) for e in b]
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
                None, tokens_a, tokens_b, autojunk=False
            ).get_opcodes():
                if tag == "equal":
                    continue
                return Divergence(
                    step,
                    phase,
                    i1,
                    tuple(_name(e) for e in a[i1:i2][:SHOWN]),
                    tuple(_name(e) for e in b[j1:j2][:SHOWN]),
                    a[i1].where if i1 < i2 else "",
                    b[j1].where if j1 < j2 else "",
                    max(e.nbytes for e in a[i1:i2] + b[j1:j2]),
                )
    return None


def _name(event: Event) -> str:
    return f"{event.kind} {format_bytes(event.nbytes)}"
