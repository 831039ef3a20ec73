"""Whether the run's own noise could swap its two biggest levers.

A stack sampler at 10 ms sees a 30 ms step three times: one step's shares are coarse, and the
mean over the run carries a standard error that a verdict has to clear. When the second finding
could buy as much as the first within two standard errors of each share, the report says the
two are too close to call, with both numbers, instead of flipping a coin between runs.
"""

from __future__ import annotations

import math
import statistics

from trainmedic.run.diagnose import amdahl
from trainmedic.run.probe.recorder import SLOTS
from trainmedic.run.report.model import Finding

#: Standard errors a lead must clear (about 95 % for a normal mean).
Z = 2.0
_MIN_STEPS = 4


def close_call(
    findings: list[Finding], per_step: list[tuple[int, list[float]]], mapping: dict[str, dict[str, float]]
) -> str | None:
    """A note when the first two findings (of different categories) are within the noise."""
    if len(findings) < 2 or findings[0].category == findings[1].category:
        return None
    first, second = findings[0], findings[1]
    shares = _per_step_shares(per_step, mapping, (first.category, second.category))
    if len(shares[first.category]) < _MIN_STEPS:
        return None
    low = _speedup(first, first.share - Z * _stderr(shares[first.category]))
    high = _speedup(second, second.share + Z * _stderr(shares[second.category]))
    if high < low:
        return None
    n = len(shares[first.category])
    return (
        f"Too close to call between {first.category} ({first.share:.0%} of the step, buys "
        f"×{first.expected_speedup:.2f}) and {second.category} ({second.share:.0%}, buys "
        f"×{second.expected_speedup:.2f}): over {n} steps the step-to-step noise could swap them. "
        "Both are listed; run more steps (--steps) to separate them."
    )


def _per_step_shares(
    per_step: list[tuple[int, list[float]]], mapping: dict[str, dict[str, float]], categories: tuple[str, ...]
) -> dict[str, list[float]]:
    shares: dict[str, list[float]] = {c: [] for c in categories}
    for _index, slots in per_step:
        sampled = sum(slots)
        if sampled <= 0:
            continue  # a step the sampler never saw inside carries no share of its own
        spread = dict.fromkeys(categories, 0.0)
        for slot, weight in zip(SLOTS, slots):
            for category, fraction in mapping.get(slot, {}).items():
                if category in spread:
                    spread[category] += weight * fraction
        for category in categories:
            shares[category].append(spread[category] / sampled)
    return shares


def _stderr(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 1.0


def _speedup(finding: Finding, share: float) -> float:
    """The finding's speedup had its share been ``share``, with the same fix."""
    share = min(max(share, 0.0), 1.0)
    p, s = finding.share, finding.expected_speedup
    if p <= 0 or s <= 1.0:
        return 1.0
    rest = 1.0 / s - 1.0 + p  # the fixed share's new size: share / factor
    if rest <= 0:
        return s  # rounding left no room for the factor: the finding's own number
    return amdahl.expected_speedup(share, p / rest)
