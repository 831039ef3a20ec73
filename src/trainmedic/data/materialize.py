"""Read a source once, front to back, reporting progress; the tiers decide where the rows go."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from trainmedic.data.sources.base import Source
from trainmedic.errors import FieldError


class Progress(Protocol):
    """What materialisation reports: the library calls it, a renderer (report/) draws it."""

    def start(self, description: str, total_rows: int | None) -> None: ...

    def advance(self, rows: int) -> None: ...

    def stop(self) -> None: ...


class NoProgress:
    def start(self, description: str, total_rows: int | None) -> None:
        pass

    def advance(self, rows: int) -> None:
        pass

    def stop(self) -> None:
        pass


def progress_for(progress: bool | Progress | None, unit: str = "rows") -> Progress:
    """The ``progress=`` argument of data.load and batch.generate as an object: None draws a bar
    when stderr is a terminal, True always, False never; anything else is used as given."""
    if progress is False:
        return NoProgress()
    if progress is None or progress is True:
        if progress is None and not sys.stderr.isatty():
            return NoProgress()
        from trainmedic.progress import ProgressBar

        return ProgressBar(unit=unit)
    return progress


class Reading:
    """Iterates a source's chunks as (first row, {field: array}) and times the whole read."""

    def __init__(self, source: Source, progress: Progress, what: str) -> None:
        self.source = source
        self.progress = progress
        self.what = what
        self.rows = 0
        self.seconds = 0.0

    def __iter__(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        source = self.source
        chunk_rows = source.chunk_rows()
        started = time.perf_counter()
        self.progress.start(f"{self.what} {_short(source.description)}", source.length)
        # Rows arrive as millions of short-lived Python objects (query rows, samples); each
        # full collection then walks every object torch, h5py and SQLAlchemy created too. Freezing
        # those first halved a 150k-row SQLite read (290 -> 125 ms, benchmarks/data_tiers.py).
        # A user's own freeze (before forking workers) is left alone.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            for chunk in source.iter_chunks(chunk_rows):
                n = _rows(chunk)
                yield self.rows, chunk
                self.rows += n
                self.progress.advance(n)
        finally:
            if freeze:
                gc.unfreeze()
            self.progress.stop()
            self.seconds = time.perf_counter() - started


def read_into_host(source: Source, progress: Progress) -> tuple[dict[str, np.ndarray], float]:
    """The whole source as one contiguous array per field, and the seconds the read took."""
    reading = Reading(source, progress, "loading")
    if source.length is not None and source.specs:
        arrays = {s.name: np.empty((source.length,) + s.shape, dtype=s.dtype) for s in source.specs}
        for start, chunk in reading:
            for name, values in chunk.items():
                arrays[name][start : start + len(values)] = values
        check_complete(source, reading.rows)
        return arrays, reading.seconds
    # Length unknown until the end (a query): keep the chunks, join them once.
    parts: dict[str, list[np.ndarray]] = {}
    for _, chunk in reading:
        for name, values in chunk.items():
            parts.setdefault(name, []).append(values)
    arrays = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    return {s.name: arrays[s.name] for s in source.specs}, reading.seconds


def _short(description: str, width: int = 36) -> str:
    """The end of a long path or URL: the part that tells sources apart on one line."""
    return description if len(description) <= width else "…" + description[-(width - 1) :]


def _rows(chunk: dict[str, np.ndarray]) -> int:
    lengths = {name: len(values) for name, values in chunk.items()}
    n = next(iter(lengths.values()))
    for name, m in lengths.items():
        if m != n:
            raise FieldError(f"field {name!r} returned {m} rows in a chunk where the others returned {n}.")
    return n


def check_complete(source: Source, rows: int) -> None:
    if rows != source.length:
        raise FieldError(
            f"{source.description} said it has {source.length} samples but yielded {rows} when read; "
            f"it changed while being read. Load it again."
        )
