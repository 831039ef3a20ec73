"""Learn cuDNN's convolution workspaces from a recorded step.

A workspace is allocated and freed at once, inside its kernel: a *transient*. Everything else a
step allocates is its skeleton, which the planner models op by op, so the planned skeleton and
the recorded one align (``difflib``, per step and phase). Between two aligned skeleton events
the plan's transients and the card's sit in the same gap: there the card's transient that no
modelled buffer accounts for (a reduction's staging, softmax's temporary, an attention
workspace: each has its exact planned size) is the workspace cuDNN took for the convolution pass
the plan put in that gap, and a pass with no such transient took none.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from trainmedic.plan.allocator import round_size
from trainmedic.plan.compare import planned_events
from trainmedic.plan.recorded import Event, RecordedStep
from trainmedic.plan.trace import Trace


@dataclass
class _Part:
    """One step and phase of one side: skeleton tokens, and the transients after each of them."""

    skeleton: list[tuple[str, int]] = field(default_factory=list)
    gaps: dict[int, list[Event]] = field(default_factory=dict)


def learn_workspaces(trace: Trace, recorded: RecordedStep) -> tuple[list[dict], int]:
    """``(entries, unmatched)``: a ``{"key", "batch", "bytes"}`` entry per convolution pass whose
    workspace the recording shows, and how many planned passes could not be placed."""
    passes = {sid: conv for sid, conv in trace.conv_passes if sid is not None}
    _, planned = planned_events(trace)
    plan, real = _parts(planned), _parts(recorded.events)
    learned: dict[tuple[str, int], int] = {}
    unmatched = 0
    for part, p in plan.items():
        r = real.get(part, _Part())
        gap_of = _matched_gaps(p.skeleton, r.skeleton)
        for position, transients in p.gaps.items():
            convs = [e for e in transients if e.block in passes]
            if not convs:
                continue
            if position not in gap_of:
                unmatched += len(convs)
                continue
            found = list(r.gaps.get(gap_of[position], []))
            for event in transients:  # the modelled buffers take their exact match out first
                if event.block not in passes:
                    size = round_size(event.nbytes)
                    match = next((x for x in found if round_size(x.nbytes) == size), None)
                    if match is not None:
                        found.remove(match)
            for index, event in enumerate(convs):
                conv = passes[event.block]
                nbytes = found[index].nbytes if index < len(found) else 0
                learned[(conv.key(), conv.batch)] = nbytes
    entries = [
        {"key": key, "batch": batch, "bytes": nbytes} for (key, batch), nbytes in sorted(learned.items())
    ]
    return entries, unmatched


def _parts(events: list[Event]) -> dict[tuple[int, str], _Part]:
    parts: dict[tuple[int, str], _Part] = {}
    index = 0
    while index < len(events):
        event = events[index]
        part = parts.setdefault((event.step, event.phase), _Part())
        following = events[index + 1] if index + 1 < len(events) else None
        if (
            event.kind == "alloc"
            and following is not None
            and following.kind == "free"
            and following.block == event.block
        ):
            part.gaps.setdefault(len(part.skeleton), []).append(event)
            index += 2
            continue
        part.skeleton.append((event.kind, round_size(event.nbytes)))
        index += 1
    return parts


def _matched_gaps(plan: list, real: list) -> dict[int, int]:
    """Plan gap -> card gap, for gaps whose skeleton events on both sides are aligned."""
    gaps: dict[int, int] = {}
    for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, plan, real, autojunk=False).get_opcodes():
        if tag == "equal":
            # Gap g lies before skeleton event g; inside an equal run both neighbours align.
            for offset in range(i2 - i1 + 1):
                gaps[i1 + offset] = j1 + offset
    return gaps
