"""Reading a hotspot's formula back: the numbers it multiplies and the bytes it states."""

from __future__ import annotations

import math
import re

from trainmedic.units import parse_bytes

_NUMERIC = re.compile(r"^(?:.*?= )?(?:(\d+) × )?([0-9·²]+) = ([0-9.]+ [KMGTP]?i?B)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def product_and_stated(formula: str) -> tuple[int, int, int]:
    """``(product, stated bytes, the unit it was stated in)`` of a formula's numeric side, as
    ``2 × (B·S)·V·bytes = 2 × 12·1024·50304·4 = 4.6 GiB`` prints it."""
    head = formula.split(";")[0]
    match = _NUMERIC.match(head)
    assert match, f"no numeric side in {formula!r}"
    count, numbers, stated = match.groups()
    product = int(count or 1)
    for factor in numbers.split("·"):
        product *= int(factor[:-1]) ** 2 if factor.endswith("²") else int(factor)
    return product, parse_bytes(stated), _UNITS[stated.split()[1]]


def assert_multiplies_out(formula: str, hotspot_bytes: int) -> None:
    """The printed product is the printed size (to its one decimal), and no more than the line holds."""
    product, stated, unit = product_and_stated(formula)
    assert math.isclose(product, stated, abs_tol=0.051 * unit), formula
    assert product <= hotspot_bytes * 1.001 + 1, (formula, hotspot_bytes)
