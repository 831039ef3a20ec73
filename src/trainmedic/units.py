"""Human-readable quantities shared by report text and findings, and the parser for sizes users type."""

from __future__ import annotations

import math
import re
from typing import TypeGuard


def format_seconds(seconds: float) -> str:
    """``36.50 s`` from a second up, ``15.1 ms`` below."""
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def finite(x: float | None) -> TypeGuard[float]:
    """A real, finite number (not None, not a bool, not NaN or infinite)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def format_sig3(x: float | None) -> str:
    """Three significant digits, trailing zeros kept (``6.00``, ``11.4``, ``12,300``); ``—`` if unknown."""
    if not finite(x):
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        digits = math.floor(math.log10(abs(x))) + 1
        return f"{round(x, 3 - digits):,.0f}"
    text = f"{x:#.3g}"
    return text.rstrip(".") if "e" not in text else text


def format_flops(flops: float | None) -> str:
    """``312 TFLOP/s``, ``850 GFLOP/s``: a rate of floating-point operations."""
    if not finite(flops):
        return "—"
    return f"{format_sig3(flops / 1e12)} TFLOP/s" if flops >= 1e12 else f"{format_sig3(flops / 1e9)} GFLOP/s"


def format_bandwidth(bytes_per_s: float | None) -> str:
    """``2,039 GB/s`` (datasheet SI units, whole above 100 so the datasheet figure survives)."""
    if not finite(bytes_per_s):
        return "—"
    gbs = bytes_per_s / 1e9
    return f"{gbs:,.0f} GB/s" if gbs >= 100 else f"{format_sig3(gbs)} GB/s"


def format_bytes(size: float) -> str:
    """``1.5 GiB``, ``12.0 MiB``, ``512 B``: binary units, as memory is sold and reported by the OS."""
    size = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


# Bare K/M/G/T are binary: nvidia-smi prints MiB, torch reports bytes that people divide by 2**30,
# and "80G" typed at a prompt almost always means the GiB figure seen there. An explicit "B" after
# the letter ("80GB") keeps the SI meaning, as NVIDIA's and disk vendors' datasheets use it.
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "kb": 10**3,
    "m": 2**20,
    "mib": 2**20,
    "mb": 10**6,
    "g": 2**30,
    "gib": 2**30,
    "gb": 10**9,
    "t": 2**40,
    "tib": 2**40,
    "tb": 10**12,
}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")


def parse_bytes(text: str | int) -> int:
    """Bytes in a size a person typed: ``"48GiB"``, ``"48 GB"``, ``"512MiB"``, ``"1.5GiB"``, ``"123456"``.

    Units are case-insensitive. ``KiB/MiB/GiB/TiB`` and bare ``K/M/G/T`` are powers of 1024;
    ``KB/MB/GB/TB`` are powers of 1000. A plain number is bytes and must be whole. Fractions of a
    unit round to the nearest byte. Raises ValueError naming the text and giving examples.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size cannot be negative, got {text}")
        return text
    match = _SIZE.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ValueError(
            f"cannot read {text!r} as a size: give a number with an optional unit, e.g. 48GiB, "
            "48GB (10**9 bytes), 512MiB, 1.5GiB, 80G (same as 80GiB) or 123456 (bytes)"
        )
    number, unit = match.groups()
    if unit in ("", "b") and "." in number:
        raise ValueError(f"cannot read {text!r} as a size: a count of bytes must be whole, e.g. 123456")
    return round(float(number) * _SIZE_UNITS[unit])


_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0, "ms": 1e-3}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|min|d|h|m|s)")


def parse_duration(text: str | float) -> float:
    """Seconds in a duration a person typed: ``"8h45m"``, ``"90s"``, ``"1.5h"``, ``"2m30s"``, ``120``.

    Units: d, h, m (or min), s, ms; parts add up. A plain number is seconds. Raises ValueError
    naming the text and giving examples; negative durations are refused.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise ValueError(f"a duration must be a finite number of seconds, not negative, got {text}")
        return float(text)
    cleaned = text.strip().lower().replace(" ", "") if isinstance(text, str) else ""
    if re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", cleaned):
        return float(cleaned)
    parts = _DURATION_PART.findall(cleaned)
    if not cleaned or "".join(number + unit for number, unit in parts) != cleaned:
        raise ValueError(
            f"cannot read {text!r} as a duration: give a number with units, e.g. 8h45m, 90s, 1.5h, "
            "2m30s, 500ms, or a plain number of seconds"
        )
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def format_duration(seconds: float) -> str:
    """``9h``, ``8h45m``, ``12m05s``, ``42.00 s``: long spans in h/m, short ones as format_seconds does."""
    if seconds < 60:
        return format_seconds(seconds)
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{minutes}m{secs:02d}s"
