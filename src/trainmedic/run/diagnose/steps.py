"""Step-time statistics: median, p90 and growth over the run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

#: Growth at or above this flags a step that keeps getting slower (a growing pool)...
GROWTH_FLAG = 1.3
#: ...when every quarter of the run is also at least this much slower than the one before, so
#: that a burst of noise from a shared machine at the end of a run is not called a trend.
STEADY_RISE = 1.05
#: ...and, where CPU time says anything (not on CUDA, where the host waits on the device), the
#: process's CPU time per step grew at least this much too (see ``trend``).
CPU_GROWTH_FLAG = 1.2
#: A rise whose quarters are not each 5 % slower than the last (a loaded machine blurs one of
#: them) is still a trend when step time follows step order this closely (Kendall's tau): a
#: burst in the last quarter reaches about 0.4, a linear rise under noise 0.7 or more.
RANK_TREND = 0.6
_MIN_STEPS_FOR_GROWTH = 8
#: Kendall's tau compares every pair of steps; longer runs are thinned evenly to this many.
_MAX_RANKED_STEPS = 800


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def growth(durations: list[float]) -> float:
    """Median of the last quarter of steps over the median of the first quarter (1.0 if too few)."""
    medians = quarter_medians(durations)
    if not medians or medians[0] <= 0:
        return 1.0
    return medians[-1] / medians[0]


def quarters(values: list[float]) -> tuple[float, float]:
    """Mean of the first and last quarter of a per-step series."""
    if len(values) < _MIN_STEPS_FOR_GROWTH:
        return (0.0, 0.0)
    quarter = len(values) // 4
    return (sum(values[:quarter]) / quarter, sum(values[-quarter:]) / quarter)


def quarter_medians(durations: list[float]) -> list[float]:
    if len(durations) < _MIN_STEPS_FOR_GROWTH:
        return []
    q = len(durations) // 4
    return [statistics.median(durations[i * q : (i + 1) * q]) for i in range(3)] + [
        statistics.median(durations[-q:])
    ]


@dataclass(frozen=True)
class Trend:
    """A step that keeps getting slower: by how much, and which clock showed it."""

    #: Last-quarter median over first-quarter median of ``measure``.
    ratio: float
    #: ``"step time"`` (wall clock) or ``"CPU time per step"`` (the process's own work).
    measure: str


def trend(durations: list[float], cpu_durations: list[float] | None = None) -> Trend | None:
    """A trend, not a blip: the ratio is past the flag *and* every quarter is slower than the last.

    Wall time counts where CPU time says nothing (CUDA, where the host waits on the device), or
    when the process's CPU time per step grew too: a shared machine that slows down mid-run
    stretches wall time while the work per step stays the same. The other way round, a neighbour
    that comes and goes can hide a real rise in wall time that the process's own CPU time per
    step still shows quarter by quarter, so a steady rise there is a trend as well.
    """
    if _rises_steadily(durations) and (not cpu_durations or growth(cpu_durations) >= CPU_GROWTH_FLAG):
        return Trend(growth(durations), "step time")
    if cpu_durations and _rises_steadily(cpu_durations):
        return Trend(growth(cpu_durations), "CPU time per step")
    return None


def _rises_steadily(values: list[float]) -> bool:
    medians = quarter_medians(values)
    if not medians or medians[0] <= 0 or medians[-1] / medians[0] < GROWTH_FLAG:
        return False
    if all(later >= earlier * STEADY_RISE for earlier, later in zip(medians, medians[1:])):
        return True
    return rank_correlation(values) >= RANK_TREND


def rank_correlation(values: list[float]) -> float:
    """Kendall's tau (tau-a) between step order and step time: 1.0 when every step is slower
    than every one before it, about 0 for noise around a level."""
    series = np.asarray(values, dtype=float)
    if len(series) > _MAX_RANKED_STEPS:
        series = series[np.linspace(0, len(series) - 1, _MAX_RANKED_STEPS).astype(int)]
    n = len(series)
    if n < 2:
        return 0.0
    later = np.triu(np.ones((n, n), dtype=bool), k=1)
    signs = np.sign(series[None, :] - series[:, None])[later]
    return float(signs.sum() / len(signs))
