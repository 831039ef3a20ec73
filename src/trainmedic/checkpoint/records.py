"""What the Checkpointer reports: a checkpoint on disk, a restore, a save."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.units import format_bytes, format_seconds


@dataclass(frozen=True)
class CheckpointInfo:
    """A verified checkpoint: its step, the phase it closed (if any), where, and when it was written."""

    step: int
    phase: str | None
    path: Path
    time: dt.datetime
    seq: int
    phases_done: tuple[str, ...]
    save_seconds: float
    bytes: int

    @classmethod
    def from_manifest(cls, path: Path, manifest: dict[str, Any]) -> CheckpointInfo:
        return cls(
            step=manifest["step"],
            phase=manifest.get("phase"),
            path=path,
            time=dt.datetime.fromtimestamp(manifest.get("unix_time", 0.0), dt.timezone.utc),
            seq=manifest.get("seq", 0),
            phases_done=tuple(manifest.get("phases_done", ())),
            save_seconds=float(manifest.get("save_seconds", 0.0)),
            bytes=sum(f.get("bytes", 0) for f in manifest["files"].values()),
        )


@dataclass(frozen=True)
class SaveInfo:
    """One written checkpoint: step, where, how long the save took, and how big it is."""

    step: int
    phase: str | None
    path: Path
    seconds: float
    bytes: int
    reason: str  # first, every, phase, force, deadline, signal, close

    def __str__(self) -> str:
        return f"saved step {self.step} to {self.path} in {format_seconds(self.seconds)} ({format_bytes(self.bytes)})"


@dataclass(frozen=True)
class RestoreInfo:
    """What ``restore`` did: the checkpoint taken, those skipped and why, what was loaded or not."""

    step: int
    phase: str | None
    path: Path | None
    phases_done: tuple[str, ...]
    skipped: tuple[tuple[Path, str], ...]
    loaded: tuple[str, ...]
    missing: tuple[str, ...]
    values: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.path is None:
            head = "no checkpoint to resume from: starting at step 0"
        else:
            head = f"resumed at step {self.step} from {self.path}"
            if self.phases_done:
                head += f"; phases done: {', '.join(self.phases_done)}"
        lines = [head]
        lines += [f"skipped {path.name}: {reason}" for path, reason in self.skipped]
        if self.path is not None and self.missing:
            lines.append(f"not in the checkpoint, left as built: {', '.join(self.missing)}")
        lines += list(self.notes)
        return "\n".join(lines)
