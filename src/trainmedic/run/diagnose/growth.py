"""Which part of a step that keeps getting slower did the growing.

A step can get slower because the code does more each step (a pool re-concatenated as it
grows) or because the machine slowed down under it (a neighbour on a shared host takes
half a core mid-run). On a virtual machine both show on both clocks: the host's contention
stretches the process's own CPU time per step as well as its wall time. What tells them apart
is the rest of the step: a growing pool leaves the model's forward and backward as they were,
a machine that slows stretches every part alike. So the step is split in two parts (the batch's
preparation and the model's part, or the sampled category and everything else), and the
category grows only when its part grew clearly more than the other part did; otherwise the
report says the whole step slowed. "Clearly more" is twice the rest's growth *and* a trend's own
factor over it: a busy neighbour does not slow every part alike (a per-sample loop of tiny calls
can slow more than the model beside it, and CI once read that as growth), while a
pool that grows beside a steady model outgrew it 1.8-2.5x in the zoo, alone and beside two
busy processes. Where the step's growth showed on the wall clock, the part must also have grown
that way on the process's own CPU time when it is known (not on CUDA): code that does more each
step does more work on both clocks, while a neighbour that takes the CPU away stretches mostly
wall time (in a full test run a per-sample transform's step grew 2.0x in wall time, 1.24x in CPU
time, and its part outgrew the model's on the wall clock alone).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.categories import CATEGORIES
from trainmedic.run.diagnose import steps
from trainmedic.run.probe.recorder import SLOTS
from trainmedic.run.report.model import TimelinePoint

#: The other part of the step may grow by at most this fraction of the grown part's growth: a
#: pool that grows 1.6x beside a model that stays put gives 1.0x; a slowed machine 1.6x for both.
REST_SHARE_OF_GROWTH = 0.5
#: Below this share of the first quarter's step the other part is too small to be measured apart.
MIN_REST_SHARE = 0.03
#: ...and the grown part must have grown this much more than the rest did (their ratio): the
#: growth a trend needs (steps.GROWTH_FLAG), once the machine's share of it is taken out.
BEYOND_REST = steps.GROWTH_FLAG


@dataclass(frozen=True)
class Growth:
    """What grew in a step that kept getting slower."""

    #: The category whose seconds per step grew most; None when the whole step slowed alike.
    category: str | None
    #: The clock that showed the trend (``steps.Trend.measure``).
    measure: str
    #: The part of the step that grew most and the rest of it: a name and its last-quarter
    #: over first-quarter mean seconds per step.
    grown: tuple[str, float]
    rest: tuple[str, float] | None
    #: Set where the wall clock alone showed the part growing on its own and the process's own
    #: CPU time did not: the part's ratio on the CPU clock (None where that clock split the step
    #: otherwise, or no part's CPU time rose).
    unconfirmed: bool = False
    own_cpu: float | None = None

    def note(self) -> str | None:
        """What the report says when the step grew but no one part of it did."""
        if self.category is not None:
            return None
        part, ratio = self.grown
        if self.rest is None:
            return (
                f"The {self.measure} grew {ratio:.2f}x over the run, but {part} holds nearly all of the "
                "step, so a machine that slowed down cannot be told from code that does more each step; "
                "no finding claims growth. Rerun on an idle machine to tell."
            )
        other, other_ratio = self.rest
        if self.unconfirmed:
            cpu = f" ({self.own_cpu:.2f}x)" if self.own_cpu is not None else ""
            return (
                f"The {self.measure} grew over the run, {part} more than the rest ({ratio:.2f}x against "
                f"{other} {other_ratio:.2f}x), but on the process's own CPU time {part} did not outgrow "
                f"it{cpu}: the machine slowed down, the code did not do more each step; no finding claims growth."
            )
        if _grew_alone(ratio, other_ratio):
            return (
                f"The {self.measure} grew over the run, {part} more than the rest ({ratio:.2f}x against "
                f"{other} {other_ratio:.2f}x), but not by the {BEYOND_REST:.1f}x a machine that slows one "
                "part more than another cannot give: no finding claims growth. Rerun on an idle machine to tell."
            )
        return (
            f"The {self.measure} grew over the run, but every part of the step slowed alike ({part} "
            f"{ratio:.2f}x, {other} {other_ratio:.2f}x): the machine slowed down, not the code; no "
            "finding claims growth."
        )


def attribute(
    timeline: list[TimelinePoint],
    rising: steps.Trend,
    cpu_by_step: dict[int, float],
    per_step: dict[int, list[float]],
    mapping: dict[str, dict[str, float]],
    model_by_step: dict[int, tuple[float, float]] | None = None,
) -> Growth | None:
    """The category whose seconds per step grew most, on the clock that showed the trend, when
    its part of the step grew on its own (None when no category's seconds rose at all); a trend
    on the wall clock must show the same on the process's CPU clock where ``cpu_by_step`` has it.

    The parts are the batch's preparation and the model's forward-to-step, timed exactly by the
    hooks (``model_by_step``, wall and CPU seconds) where they saw most steps; otherwise the
    sampled slots that resolved into the category and the ones that resolved into none of it (a
    slot shared with it, user code split into a pool and its per-row draw, grows with it by
    construction and says nothing about the machine).
    """

    def on(cpu_clock: bool) -> Growth | None:
        return _on_clock(cpu_clock, timeline, rising, cpu_by_step, per_step, mapping, model_by_step)

    cpu_clock = rising.measure != "step time"
    found = on(cpu_clock)
    if found is None or found.category is None or cpu_clock or not cpu_by_step:
        return found
    own = on(True)
    if own is not None and own.category == found.category:
        return found
    ratio = _ratio_of(own, found.grown[0]) if own is not None else None
    return Growth(None, found.measure, found.grown, found.rest, unconfirmed=True, own_cpu=ratio)


def _ratio_of(growth: Growth, part: str) -> float | None:
    """``part``'s ratio in ``growth``, the grown part or the rest (None: not one of its parts)."""
    for name, ratio in (growth.grown, growth.rest or ("", None)):
        if name == part:
            return ratio
    return None


def _on_clock(
    cpu_clock: bool,
    timeline: list[TimelinePoint],
    rising: steps.Trend,
    cpu_by_step: dict[int, float],
    per_step: dict[int, list[float]],
    mapping: dict[str, dict[str, float]],
    model_by_step: dict[int, tuple[float, float]] | None,
) -> Growth | None:
    """:func:`attribute` on one clock: wall seconds per step, or the process's CPU seconds."""

    def clock(point: TimelinePoint) -> float:
        return cpu_by_step.get(point.step, 0.0) if cpu_clock and point.seconds > 0 else point.seconds

    def seconds(point: TimelinePoint, category: str) -> float:
        # The step's category shares, applied to the clock that showed the trend.
        return point.categories[category] / point.seconds * clock(point) if point.seconds > 0 else 0.0

    quarters = {c: steps.quarters([seconds(p, c) for p in timeline]) for c in CATEGORIES}
    best, best_delta = None, 0.0
    for category, (first, last) in quarters.items():
        if last - first > best_delta:
            best, best_delta = category, last - first
    if best is None:
        return None
    timed = model_by_step or {}
    if sum(p.step in timed for p in timeline) >= 0.75 * len(timeline):
        column = 1 if cpu_clock else 0  # (wall, CPU) seconds
        model = [timed[p.step][column] if p.step in timed else None for p in timeline]
        known = [(clock(p), m) for p, m in zip(timeline, model) if m is not None]
        parts = {
            "the batch's preparation": [max(c - m, 0.0) for c, m in known],
            "the model's forward to optimizer step": [m for _, m in known],
        }
    else:
        apart = [i for i, slot in enumerate(SLOTS) if not mapping.get(slot, {}).get(best)]

        def rest(point: TimelinePoint) -> float:
            slots = per_step.get(point.step)
            sampled = sum(slots) if slots else 0.0
            if sampled <= 0 or not slots:  # a step shorter than the sampling interval: the run's own split
                return clock(point) - seconds(point, best)
            return sum(slots[i] for i in apart) / sampled * clock(point)

        parts = {
            best: [seconds(p, best) for p in timeline],
            "the rest of the step": [rest(p) for p in timeline],
        }
    (grown, (g_first, g_last)), (other, (o_first, o_last)) = sorted(
        ((name, steps.quarters(series)) for name, series in parts.items()),
        key=lambda item: item[1][1] - item[1][0],
        reverse=True,
    )
    ratio = g_last / g_first if g_first > 0 else float("inf")
    if o_first < MIN_REST_SHARE * (g_first + o_first):
        return Growth(None, rising.measure, (grown, ratio), None)
    other_ratio = o_last / o_first
    beyond = ratio >= BEYOND_REST * max(other_ratio, 1.0)
    grew = _grew_alone(ratio, other_ratio) and beyond
    return Growth(best if grew else None, rising.measure, (grown, ratio), (other, other_ratio))


def _grew_alone(ratio: float, other_ratio: float) -> bool:
    """Whether the rest of the step grew by at most REST_SHARE_OF_GROWTH of what the part grew."""
    return other_ratio - 1.0 <= REST_SHARE_OF_GROWTH * (ratio - 1.0)
