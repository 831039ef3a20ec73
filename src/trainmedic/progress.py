"""Progress bars for reading a source once (``trainmedic.data``) and for generation jobs
(``trainmedic.batch``, with where the time goes); they draw on stderr."""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

from rich.progress import ProgressColumn
from rich.text import Text

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class ProgressBar:
    """Rows read (or samples made) so far, of how many when known; drawn by rich on ``stream``.
    With ``unit="samples"`` it also shows the rate, the time left and a status that
    ``describe`` sets (a generation job's seconds per stage and what sets its pace)."""

    def __init__(self, stream: IO[str] | None = None, unit: str = "rows") -> None:
        self.stream = stream
        self.unit = unit
        self._progress: Progress | None = None
        self._task: TaskID | None = None  # set with _progress

    def start(self, description: str, total_rows: int | None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(file=self.stream or sys.stderr)
        columns = [
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(self.unit),
            TimeElapsedColumn(),
        ]
        if self.unit != "rows":
            columns += [
                _RateColumn(self.unit),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
            ]
        self._progress = Progress(*columns, console=console)
        self._progress.start()
        self._task = self._progress.add_task(description, total=total_rows, status="")

    def advance(self, rows: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, rows)

    def describe(self, text: str) -> None:
        """Show ``text`` after the bar (a status, not a log line: the next call replaces it)."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, status=text)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class _RateColumn(ProgressColumn):
    """Units per second over rich's recent window (samples/s of a generation job)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-" if speed is None else f"{speed:,.0f} {self.unit}/s")
