"""Measurements -> Report: the breakdown, the bottleneck and ranked findings with their fixes."""

from __future__ import annotations

from trainmedic.run.diagnose.build import diagnose

__all__ = ["diagnose"]
