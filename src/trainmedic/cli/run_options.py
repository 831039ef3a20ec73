"""What ``trainmedic run`` was asked to do, shared by the single-process and the ranks paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    target: str
    args: list[str]
    module: bool
    steps: int | None
    json_path: Path | None
    html_path: Path | None
    warmup: int
    interval_s: float
    quiet: bool
    #: Run on this many local torchrun ranks and merge their reports (``--nproc``).
    nproc: int | None = None
    #: After the window of a diagnosis-only run, try the top finding's fix and time it.
    confirm: bool = False
