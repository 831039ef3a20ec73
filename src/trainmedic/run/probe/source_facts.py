"""What the source recorder saw, as plain frozen records (probe/sources.py fills them in).

The diagnosis reads these to write the exact ``data.load(...)`` call for the script's source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    """One column of a query's result, as a one-row peek saw it."""

    name: str
    #: ``integer``, ``real``, ``blob``, ``text`` or ``null``.
    kind: str
    #: Bytes of a BLOB value in the row seen.
    nbytes: int = 0


@dataclass(frozen=True)
class Query:
    text: str
    count: int
    #: The first run's parameters: a tuple by position, or a dict by name; () when none.
    params: Any = ()
    #: Positions (or names) whose values changed between runs: per-batch selectors.
    varying: frozenset = frozenset()
    #: True when ``params`` are literals lifted out of formatted SQL (``?`` marks them in ``text``).
    lifted: bool = False
    #: The user's file that first ran it.
    caller: str | None = None
    columns: tuple[Column, ...] = ()


@dataclass(frozen=True)
class Database:
    #: An SQLAlchemy URL (password masked); ``sqlite:////abs/path.db`` for an SQLite file.
    url: str
    connects: int
    #: Most executed first.
    queries: tuple[Query, ...] = ()
    #: ``sqlite3`` or ``sqlalchemy``: which layer saw it.
    via: str = "sqlite3"


@dataclass(frozen=True)
class Hdf5File:
    path: str
    opens: int
    #: (dataset name as ``data.load`` spells it, times opened), in first-use order.
    datasets: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class FileUse:
    path: str
    count: int
    #: A .npy file mapped rather than read (``mmap_mode``).
    mapped: bool = False


@dataclass(frozen=True)
class DatasetUse:
    """A Dataset a ``DataLoader`` was built on."""

    type_name: str
    #: The name the caller's code holds it by, when it holds it by one.
    variable: str | None
    batch_size: int | None
    num_workers: int
    length: int | None


@dataclass(frozen=True)
class LoaderUse:
    """A ``trainmedic.data.load`` call: the script already serves batches from a tier."""

    source: str
    tier: str
    batch_size: int
    device: str


@dataclass(frozen=True)
class Sources:
    databases: tuple[Database, ...] = ()
    hdf5: tuple[Hdf5File, ...] = ()
    numpy: tuple[FileUse, ...] = ()
    zarr: tuple[FileUse, ...] = ()
    datasets: tuple[DatasetUse, ...] = ()
    loaders: tuple[LoaderUse, ...] = ()
    #: The batch size the model was called with most often (from the forward hook).
    model_batch: int | None = None
