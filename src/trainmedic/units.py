"""Human-readable quantities shared by report text and findings."""

from __future__ import annotations


def format_seconds(seconds: float) -> str:
    """``36.50 s`` from a second up, ``15.1 ms`` below."""
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"
