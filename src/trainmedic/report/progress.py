"""A progress bar for reading a source once (``trainmedic.data`` calls it; it draws on stderr)."""

from __future__ import annotations

import sys
from typing import IO


class ProgressBar:
    """Rows read so far, of how many when known, with the rate; drawn by rich on ``stream``."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self._progress = None
        self._task = None

    def start(self, description: str, total_rows: int | None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.stream or sys.stderr)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rows"),
            TimeElapsedColumn(),
            console=console,
        )
        self._progress.start()
        self._task = self._progress.add_task(description, total=total_rows)

    def advance(self, rows: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, rows)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
