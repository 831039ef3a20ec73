"""The Checkpointer's ``events.jsonl`` in preflight mode, read back while and after a child runs.

One JSON object per line: ``init`` (a Checkpointer was made), ``restore`` (what it resumed from)
and ``save`` (appended only once the checkpoint is complete on disk, with content digests per
object). A line still being written has no newline yet: it is left for the next read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class EventReader:
    """Reads new complete lines of a growing events file; it may not exist yet."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        events = []
        for line in data[: end + 1].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not ours to judge; a torn line cannot happen with whole-line appends
            if isinstance(event, dict):
                events.append(event)
        return events


@dataclass
class Save:
    step: int
    digests: dict[str, str]
    #: When the save began and ended, on the monotonic clock the step timeline uses: the CPU step
    #: time leaves it out. None when the event did not say.
    started: float | None = None
    ended: float | None = None


@dataclass
class Events:
    """What one process (or one run) told about its checkpoints."""

    inits: list[dict] = field(default_factory=list)
    restores: list[dict] = field(default_factory=list)
    saves: list[Save] = field(default_factory=list)

    @property
    def uses_checkpointer(self) -> bool:
        return bool(self.inits)

    def by_step(self) -> dict[int, Save]:
        """The last save of each step (a final force save may repeat the last step)."""
        return {save.step: save for save in self.saves}

    def save_steps(self) -> list[int]:
        return sorted(self.by_step())


def read_events(path: Path, offset: int = 0) -> Events:
    events = Events()
    for event in EventReader(path, offset).read():
        kind = event.get("event")
        if kind == "init":
            events.inits.append(event)
        elif kind == "restore":
            events.restores.append(event)
        elif kind == "save" and isinstance(event.get("step"), int):
            raw = event.get("digests")
            digests = raw if isinstance(raw, dict) else {}
            events.saves.append(
                Save(
                    event["step"],
                    {str(k): str(v) for k, v in digests.items()},
                    _seconds(event.get("started")),
                    _seconds(event.get("ended")),
                )
            )
    return events


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
