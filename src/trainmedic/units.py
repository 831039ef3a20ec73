"""Human-readable quantities shared by report text and findings."""

from __future__ import annotations


def format_seconds(seconds: float) -> str:
    """``36.50 s`` from a second up, ``15.1 ms`` below."""
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def format_bytes(size: float) -> str:
    """``1.5 GiB``, ``12.0 MiB``, ``512 B``: binary units, as memory is sold and reported by the OS."""
    size = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
