"""Amdahl's law: what removing or shrinking one share of the step time buys."""

from __future__ import annotations

import math


def expected_speedup(share: float, factor: float) -> float:
    """Whole-step speedup when a cost that takes ``share`` of the step gets ``factor`` times faster."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share={share!r}; expected a fraction between 0 and 1")
    if factor <= 0:
        raise ValueError(f"factor={factor!r}; expected a positive speedup of the fixed part")
    return 1.0 / (1.0 - share + share / factor)


def ceiling(share: float) -> float:
    """The speedup if the cost vanished entirely: ``1 / (1 - share)``; infinite at share 1."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share={share!r}; expected a fraction between 0 and 1")
    return math.inf if share >= 1.0 else 1.0 / (1.0 - share)
