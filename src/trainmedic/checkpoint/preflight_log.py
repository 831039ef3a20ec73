"""The Checkpointer's side of ``trainmedic preflight``: redirected directory and an event log.

When ``TRAINMEDIC_PREFLIGHT_DIR`` is set (preflight runs the user's command with it), checkpoints
go to a scratch folder keyed by the directory the script asked for — the user's real runs are
never touched and a second process with the same command finds what the first one saved — every
``save()`` call writes, and each restore and completed save is appended to ``events.jsonl`` with
content digests and its start and end on the monotonic clock (``time.perf_counter``, shared by
every process on the machine), so preflight can kill a run after a save, resume it, compare
states, and take save time out of the measured step time. With ``TRAINMEDIC_PREFLIGHT_HOLD_AT=k``
the process stops itself (SIGSTOP) right after the first completed save of step k or later, so
the parent's SIGKILL lands after exactly that save, however fast the tiny run is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

ENV = "TRAINMEDIC_PREFLIGHT_DIR"
HOLD_ENV = "TRAINMEDIC_PREFLIGHT_HOLD_AT"


class PreflightLog:
    """Present only under preflight: where to write, and the event log."""

    def __init__(self, root: Path, hold_at: int | None = None) -> None:
        self.root = root
        self.hold_at = hold_at
        self._events = root / "events.jsonl"

    @classmethod
    def from_env(cls) -> PreflightLog | None:
        value = os.environ.get(ENV)
        hold = os.environ.get(HOLD_ENV, "")
        return cls(Path(value), int(hold) if hold.isdigit() else None) if value else None

    def redirect(self, directory: Path) -> Path:
        given = str(directory.expanduser().absolute())
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", directory.name) or "checkpoints"
        key = hashlib.sha256(given.encode()).hexdigest()[:10]
        return self.root / "checkpoints" / f"{stem}-{key}"

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields, "pid": os.getpid()}, default=str)
        with open(self._events, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def saved(self, step: int, **fields: Any) -> None:
        """Log a completed save; freeze here when it is the save the parent waits to kill after."""
        self.emit("save", step=step, **fields)
        if self.hold_at is not None and step >= self.hold_at:
            self.hold_at = None
            os.kill(os.getpid(), signal.SIGSTOP)
