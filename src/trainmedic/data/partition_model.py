"""What a partition of a source is, as ``partitions`` (files) and ``partitions_sql`` (queries) cut it."""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.data.sources.base import FieldSpec


@dataclass(frozen=True)
class Partition:
    """Rows ``start..stop-1`` of the cache; for SQL also the key range ``[key_lo, key_hi)`` they hold."""

    index: int
    start: int
    stop: int
    key_lo: int | None = None
    key_hi: int | None = None

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def describe(self, count: int, key: str | None = None) -> str:
        text = f"partition {self.index} of {count} (rows {self.start}-{self.stop - 1}"
        if key is not None and self.key_lo is not None and self.key_hi is not None:
            text += f", {key} {self.key_lo}..{self.key_hi - 1}"
        return text + ")"


@dataclass(frozen=True)
class Recipe:
    """What a worker needs to open the source again: its kind, where it is, and how it was asked."""

    kind: str
    #: An absolute path, or the SQLAlchemy URL with its password (the worker must log in too).
    target: str
    fields: tuple[str, ...] | None
    query: str | None = None
    schema: dict | None = None
    #: The integer column an SQL query is split on, as named and as quoted for the database.
    key: str | None = None
    key_sql: str | None = None


@dataclass(frozen=True)
class Split:
    """A source's partitions, in row order, with the field specs and row count they add up to."""

    partitions: tuple[Partition, ...]
    specs: tuple[FieldSpec, ...]
    length: int
