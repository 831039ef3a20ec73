"""When two configurations are a tie, and which one to recommend then.

Two speeds are a tie when their gap is inside the noise the trials showed: the sum of both
spreads (half the trials' range over the median), and never less than ``TIE_FLOOR``: a machine
shared with others drifts by a few per cent between two measurements taken minutes apart, which
no single configuration's trials can see. Among a tie the recommendation is the configuration
with the fewest changes from the baseline: a change that buys nothing measurable is no advice.
"""

from __future__ import annotations

from trainmedic.tune.model import Config, Row

TIE_FLOOR = 0.03


def within_noise(faster: Row, other: Row) -> bool:
    """Whether ``other`` is slower than ``faster`` by no more than the noise of the two."""
    a, b = faster.measurement, other.measurement
    if a is None or b is None:
        return False
    tolerance = max(TIE_FLOOR, a.spread + b.spread)
    return a.samples_per_s - b.samples_per_s <= tolerance * a.samples_per_s


def changes(config: Config, baseline: Config | None) -> int:
    """How many settings differ from the baseline (batch size, precision, compile, memory format)."""
    if baseline is None:
        return 0
    if config.overrides or baseline.overrides:  # a script: each option that differs is one change
        mine, theirs = dict(config.overrides), dict(baseline.overrides)
        return sum(mine.get(k) != theirs.get(k) for k in mine.keys() | theirs.keys())
    fields = ("batch_size", "precision", "compile", "memory_format")
    return sum(getattr(config, f) != getattr(baseline, f) for f in fields)


def pick_best(measured: list[Row], baseline: Config | None) -> tuple[Config | None, list[Config]]:
    """The recommended configuration and the others tied with the fastest one."""
    if not measured:
        return None, []
    fastest = max(measured, key=lambda r: r.samples_per_s or 0.0)
    tied = [r for r in measured if r is fastest or within_noise(fastest, r)]
    best = min(tied, key=lambda r: (changes(r.config, baseline), -(r.samples_per_s or 0.0)))
    return best.config, [
        r.config for r in sorted(tied, key=lambda r: -(r.samples_per_s or 0.0)) if r is not best
    ]
