"""Runs that ran out of GPU memory, or came close: point at the planner, which needs no GPU.

An OOM an hour into a run, and batch-size searches that OOM on purpose, are what ``trainmedic
plan`` replaces: it predicts the step's peak and the largest batch that fits before a run starts.
"""

from __future__ import annotations

from trainmedic.run.report.model import DeviceInfo
from trainmedic.units import format_bytes

#: Peak allocated over the card's memory above which the next larger batch or input is an OOM.
NEAR_FULL = 0.9


def memory_notes(message: str | None, device: DeviceInfo) -> list[str]:
    """Report notes for a run that hit out-of-memory or whose peak left under 10 % of the card."""
    device_kind, name = device.kind, device.name
    card = device.details.get("gpu_memory_bytes")
    peak = device.details.get("max_memory_allocated_bytes")
    plan = (
        f'`trainmedic plan model.py:build --device "{name}" --max-batch --headroom 0.1`'
        if device_kind == "cuda"
        else ("`trainmedic plan model.py:build --device <gpu> --max-batch --headroom 0.1`")
    )
    notes = []
    if message and ("out of memory" in message.lower() or "OutOfMemoryError" in message):
        notes.append(
            f"The run ran out of memory ({message}). {plan} predicts the step's peak and the largest batch that "
            "fits on a CPU-only machine, with the lines that hold the most memory, instead of finding it by OOM."
        )
    elif device_kind == "cuda" and card and peak and peak >= NEAR_FULL * card:
        notes.append(
            f"Peak allocated GPU memory was {format_bytes(peak)} of {format_bytes(card)} ({peak / card:.0%}): a larger "
            f"batch or input will run out of memory. {plan} gives the largest batch that fits with headroom."
        )
    return notes
