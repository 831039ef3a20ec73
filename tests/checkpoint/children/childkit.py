"""Helpers shared by the child scripts the checkpoint tests run as real processes.

A child reports to its parent through a progress file: one line per event, appended with a
single ``write`` on an O_APPEND descriptor and fsynced, so a parent that SIGKILLs the child at any
moment reads only whole lines that really happened before the kill.
"""

from __future__ import annotations

import json
import os
import signal


class Progress:
    """Append-only event log; ``log("saved", 3)`` writes the line ``saved 3``."""

    def __init__(self, path: str | None) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        # Bound now: kill_points.py wraps os.fsync to count the Checkpointer's calls, and the
        # progress log must not show up in that count.
        self._write, self._fsync = os.write, os.fsync

    def log(self, *parts: object) -> None:
        if self._fd is None:
            return
        self._write(self._fd, (" ".join(str(p) for p in parts) + "\n").encode())
        self._fsync(self._fd)

    def log_json(self, tag: str, value: object) -> None:
        self.log(tag, json.dumps(value))


def parse_every(text: str) -> int | str:
    """``--every 5`` means every 5 steps; ``--every 10m`` a wall-clock interval."""
    return int(text) if text.isdigit() else text


def hold() -> None:
    """Block until the parent kills this process: a deterministic kill point (no timing race)."""
    while True:
        signal.pause()
