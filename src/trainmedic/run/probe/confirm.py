"""The confirmation experiment: a few more steps with the top finding's fix on and off, timed.

The sampled share of a finding says how much of the step its line took, not what removing that
line buys: removing it can also remove work around it (allocations, cache misses, GIL handoffs),
or the time can come back elsewhere (work that overlapped with it now waits somewhere else).
So after the steady-state window of a diagnosis-only run the fix is tried in the same process
(counterfactuals.py) and both arms are timed.

The arms alternate in blocks, as-is / fixed / fixed / as-is (ABBA, repeated), so that a machine
that drifts steadily slows both alike. The first step of every block is dropped: it is the
transition (a loader's queue that refilled while the other arm ran, a cache that is cold again).
The gain is the as-is median step over the fixed one; its interval is the range of the gains of
the block pairs. What the report makes of it is diagnosis's business (diagnose/confirmed.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from trainmedic.run.probe.counterfactuals import Counterfactual

#: Steps per block; the first of each is dropped.
BLOCK = 3
#: ABBA quads: at least one, at most this many.
MAX_QUADS = 4
#: The confirmation may add at most this share of the window's time.
BUDGET = 0.2
#: The order of the arms over one quad of blocks: as-is, fixed, fixed, as-is.
PATTERN = (False, True, True, False)
#: The most steps a confirmation runs.
MAX_STEPS = MAX_QUADS * len(PATTERN) * BLOCK


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    """What the confirmation measured, or why it did not run."""

    #: The finding it tried: its category and ``file:line``.
    category: str
    where: str | None
    #: What the fixed arm changed, in words ("batches replayed from memory"); None if nothing ran.
    change: str | None = None
    #: Wall seconds of the timed steps of each arm.
    as_is: list[float] = field(default_factory=list)
    fixed: list[float] = field(default_factory=list)
    #: The gain of each (as-is block, fixed block) pair: the interval's ends.
    pair_gains: list[float] = field(default_factory=list)
    #: How often the fixed arm used the change; 0: the change never took effect.
    used: int = 0
    #: Why there was no confirmation, or why it stopped early; None when it ran to the end.
    problem: str | None = None
    #: Wall seconds the whole experiment took, transitions included.
    seconds: float = 0.0
    #: Blocks run to the end, of those planned: fewer when the script ended first (its own
    #: last step); a pair of blocks is still a measurement.
    blocks: int = 0
    planned_blocks: int = 0

    @property
    def measured(self) -> bool:
        return bool(self.as_is and self.fixed and self.used and self.problem is None)

    @property
    def gain(self) -> float:
        return statistics.median(self.as_is) / statistics.median(self.fixed) if self.measured else 0.0


def plan_quads(*, window_s: float, step_s: float, expected: float) -> int:
    """How many ABBA quads fit in ``BUDGET`` of the window's time, if the fix buys ``expected``."""
    if step_s <= 0 or window_s <= 0:
        return 1
    # A quad: two as-is blocks at the current step time, two fixed ones at the expected time.
    quad_s = 2 * BLOCK * step_s * (1 + 1 / max(expected, 1.0))
    return max(1, min(MAX_QUADS, int(BUDGET * window_s / quad_s)))


class Experiment:
    """Drives the arms step by step (the step clock calls :meth:`step` once a step)."""

    PATTERN = PATTERN

    def __init__(
        self, counterfactual: Counterfactual, *, category: str, where: str | None, quads: int
    ) -> None:
        self.counterfactual = counterfactual
        self.category = category
        self.where = where
        self.blocks = [fixed for _ in range(quads) for fixed in self.PATTERN]
        self._block = 0
        self._in_block = 0
        self._durations: list[list[float]] = [[] for _ in self.blocks]
        self._elapsed = 0.0
        self.result: Confirmation | None = None
        counterfactual.arm.fixed = self.blocks[0]

    def step(self, seconds: float) -> bool:
        """The step that just ended took ``seconds`` (wall). True when the experiment is over."""
        self._elapsed += seconds
        if self._in_block:  # the block's first step is its transition
            self._durations[self._block].append(seconds)
        self._in_block += 1
        if self._in_block == BLOCK:
            self._block, self._in_block = self._block + 1, 0
            if self._block == len(self.blocks):
                self.finish()
                return True
            self.counterfactual.arm.fixed = self.blocks[self._block]
        return False

    def finish(self, problem: str | None = None) -> Confirmation:
        """Take the fix out and summarise (also when the run ends before the last block)."""
        if self.result is not None:
            return self.result
        self.counterfactual.arm.fixed = False
        self.counterfactual.remove()
        as_is = [d for block, fixed in zip(self._durations, self.blocks) if not fixed for d in block]
        fixed_steps = [d for block, fixed in zip(self._durations, self.blocks) if fixed for d in block]
        pairs = []
        # Each as-is block with the fixed block beside it: A1-B1 and B2-A2 in each quad.
        for start in range(0, len(self.blocks), 2):
            if start + 1 >= self._block:
                break  # a pair only of blocks run to their end
            a, b = self._durations[start], self._durations[start + 1]
            if a and b:
                first_fixed = self.blocks[start]
                as_is_block, fixed_block = (b, a) if first_fixed else (a, b)
                pairs.append(statistics.median(as_is_block) / statistics.median(fixed_block))
        if problem is None and not pairs:
            problem = f"the run ended after {self._block} of {len(self.blocks)} blocks of the confirmation"
        if problem is None and not self.counterfactual.used:
            problem = f"the change ({self.counterfactual.change}) never took effect: the code it changes did not run"
        self.result = Confirmation(
            category=self.category,
            where=self.where,
            change=self.counterfactual.change,
            as_is=as_is,
            fixed=fixed_steps,
            pair_gains=[round(g, 4) for g in pairs],
            used=self.counterfactual.used,
            problem=problem,
            seconds=self._elapsed,
            blocks=self._block,
            planned_blocks=len(self.blocks),
        )
        return self.result
