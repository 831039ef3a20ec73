"""Whether noise could swap a run's two biggest levers.

A stack sampler at 10 ms sees a 30 ms step three times: one step's shares are coarse, and the
mean over the run carries a standard error that a verdict has to clear. Runs of the same script
also differ by more than that error shows (a busier machine in one run, the sampler's phase), so
a share's band is two standard errors of both. A smaller finding leads before the largest share
when its fix buys LEVER_MARGIN more (build.py); when the order of the first two could be the
other way round anywhere within their bands, the report says the two are too close to call, with
both numbers, so a run that lands on either side of the line never reads as a clear verdict.
"""

from __future__ import annotations

import math
import statistics

from trainmedic.run.diagnose import amdahl
from trainmedic.run.probe.recorder import SLOTS
from trainmedic.run.report.model import Finding

#: Standard errors a lead must clear (about 95 % for a normal mean).
Z = 2.0
#: How much more a smaller finding's fix must buy to lead before the largest share: the fixes'
#: factors are round numbers from measured cases, so a lever must buy clearly more. A DataLoader at 25 % of
#: a CPU step (×1.25) does not outrank the model at 75 % (×1.21); by ablation removing it bought ×1.16.
LEVER_MARGIN = 1.1
#: A category's share moves this much (one standard deviation) between runs of the same script
#: on the same machine: over 5 runs of each of the 28 CPU cases of benchmarks/wild.py, 0.001 to
#: 0.046, at most 0.025 in three cases of four
#: (benchmarks/results/wild-cpu-5runs-2026-11-27.json). pytorch/examples' vae read its
#: DataLoader at 24-28 % in those runs and at 33 % in a later one, where it outranked the model
#: with no note: within the run the lead looked clear.
BETWEEN_RUNS_SD = 0.025
_MIN_STEPS = 4


def close_call(
    findings: list[Finding],
    per_step: list[tuple[int, list[float]]],
    mapping: dict[str, dict[str, float]],
    more: str = "run more steps (--steps)",
) -> str | None:
    """A note when the first two findings (of different categories) could swap within their bands;
    ``more`` says how to get more evidence (``trainmedic attach``: sample longer)."""
    if len(findings) < 2:
        return None
    first, second = findings[0], findings[1]
    bands = _bands((first, second), per_step, mapping)
    if bands is None:
        return None
    (first_low, _), (_, second_high) = bands
    largest = max(findings, key=lambda f: f.share)
    if first is largest:
        # The second leads only by clearing LEVER_MARGIN (build.py): close when it could have.
        close = second_high >= LEVER_MARGIN * first_low
    elif second is largest:
        # A lever that cleared the margin: close when it might not have.
        close = first_low < LEVER_MARGIN * second_high
    else:
        close = second_high >= first_low
    if not close:
        return None
    n = len(_per_step_shares(per_step, mapping, (first.category,))[first.category])
    return (
        f"{note_start(first.category)}{first.share:.0%} of the step, buys "
        f"×{first.expected_speedup:.2f}) and {second.category} ({second.share:.0%}, buys "
        f"×{second.expected_speedup:.2f}): over {n} steps, with the spread between runs, noise could swap them. "
        f"Both are listed; {more} to separate them."
    )


def note_start(category: str) -> str:
    """How the close-call note with ``category`` as the first lever begins (a merged report that
    drops the close call drops this note, not launches.py's "too close" between two bounds)."""
    return f"Too close to call between {category} ("


def _bands(
    pair: tuple[Finding, Finding],
    per_step: list[tuple[int, list[float]]],
    mapping: dict[str, dict[str, float]],
) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """Each finding's speedup at the low and the high end of its share's band (None when the two
    are one category or too few steps were sampled)."""
    if pair[0].category == pair[1].category:
        return None
    shares = _per_step_shares(per_step, mapping, (pair[0].category, pair[1].category))
    if len(shares[pair[0].category]) < _MIN_STEPS:
        return None
    bands = []
    for finding in pair:
        spread = Z * math.hypot(_stderr(shares[finding.category]), BETWEEN_RUNS_SD)
        bands.append((_speedup(finding, finding.share - spread), _speedup(finding, finding.share + spread)))
    return bands[0], bands[1]


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
