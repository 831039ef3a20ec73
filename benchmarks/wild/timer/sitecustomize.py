"""Loads the truth runs' step clock (benchmarks/wild.py; on PYTHONPATH in truth runs only)."""

import _wild_timer  # noqa: F401
