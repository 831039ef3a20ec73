"""Helpers for tests that drive real processes: is a pid still running, wait for a condition."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition: Callable[[], object], timeout: float = 60.0) -> None:
    """Poll ``condition`` until it is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)  # polling interval only; the condition is what synchronises
