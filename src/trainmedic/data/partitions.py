"""Splitting a source into row ranges that separate processes read and write on their own.

``data.build_cache`` hands each partition to a Ray task; the task opens the source again from a
:class:`Recipe` (a path or URL, never an open handle: HDF5 handles must not cross processes and a
pickled ``.npy`` memory-map would ship the whole array) and reads just its rows. What decides
the split, per source kind:

* HDF5 / Zarr: ranges of whole chunks along the sample axis (``Source.chunk_length``, the
  largest chunk or shard of the fields), so no chunk is decompressed by two tasks;
* ``.npy`` files and ``trainmedic.batch`` shard folders: any row (memory-mapped, no chunks);
* an SQL query: ranges of an integer key column (``partition_by=``), see ``partitions_sql``.

A dict of arrays or a ``Dataset`` lives in the caller's memory: there is nothing for another
process to read, so they are refused with the serial call that builds their cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from trainmedic.data.partition_model import Partition, Recipe, Split
from trainmedic.data.sources import open_source
from trainmedic.data.sources.base import FieldSpec, Source
from trainmedic.errors import SourceError

#: Source kinds whose files a worker process can open again by path.
FILE_KINDS = ("hdf5", "zarr", "numpy", "shards")


def recipe_for(
    given: Any, source: Source, fields: Any, query: str | None, schema: dict | None, partition_by: str | None
) -> Recipe:
    """The recipe of an opened source, or SourceError when it cannot be split or partition_by misfits."""
    if source.kind == "sql":
        from trainmedic.data.partitions_sql import sql_recipe
        from trainmedic.data.sources.sql import SqlSource

        # A query read into a dict of arrays is of kind "sql" too, and lives in memory (below).
        if isinstance(source, SqlSource):
            return sql_recipe(given, source, fields, schema, partition_by)
    if partition_by is not None:
        raise SourceError(
            f"partition_by={partition_by!r} splits an SQL query on a key column, but {source.description} is "
            f"a {source.kind} source, which is split along its rows (chunk-aligned); leave partition_by out."
        )
    if source.kind not in FILE_KINDS or not hasattr(source, "path"):
        raise SourceError(
            f"build_cache reads a source in separate processes, but a {source.kind} source "
            f"({source.description}) lives in this process's memory, where no worker can read it; "
            f"build its cache here with data.load(..., tier='disk'), or save it as .npy/HDF5/Zarr first."
        )
    return Recipe(source.kind, str(source.path.resolve()), tuple(source.fields))


def split(source: Source, recipe: Recipe, count: int) -> Split:
    """At most ``count`` partitions of about equal rows (SQL: of equal key width)."""
    if recipe.kind == "sql":
        from trainmedic.data.partitions_sql import split_sql
        from trainmedic.data.sources.sql import SqlSource

        assert isinstance(source, SqlSource)  # recipe_for makes an "sql" recipe of one only
        return split_sql(source, recipe, count)
    assert source.length is not None
    return Split(split_rows(source.length, source.chunk_length, count), source.specs, source.length)


def split_rows(length: int, chunk_length: int, count: int) -> tuple[Partition, ...]:
    """``count`` ranges of whole chunks (the last one ends at ``length``), fewer when chunks run out."""
    chunk_length = max(1, chunk_length)
    units = -(-length // chunk_length)
    count = max(1, min(count, units))
    bounds = [min(length, units * i // count * chunk_length) for i in range(count + 1)]
    return tuple(Partition(i, a, b) for i, (a, b) in enumerate(itertools.pairwise(bounds)))


def open_partition(recipe: Recipe, part: Partition) -> Source:
    """The source a worker reads ``part`` from (an SQL source runs just the partition's key range)."""
    if recipe.kind == "sql":
        from trainmedic.data.partitions_sql import partition_source

        return partition_source(recipe, part)
    return open_source(recipe.target, list(recipe.fields) if recipe.fields else None)


def read_partition(
    recipe: Recipe, source: Source, part: Partition, specs: tuple[FieldSpec, ...]
) -> Iterator[dict[str, np.ndarray]]:
    """The partition's rows in order, in pieces of about ``DEFAULT_CHUNK_BYTES`` (memory stays bounded)."""
    if recipe.kind == "sql":
        from trainmedic.data.partitions_sql import read_sql_partition

        yield from read_sql_partition(source, specs)
        return
    step = source.chunk_rows()
    for a in range(part.start, part.stop, step):
        b = min(a + step, part.stop)
        rows = np.arange(a, b, dtype=np.int64)
        chunk = {}
        for spec in specs:
            out = np.empty((b - a,) + spec.shape, dtype=spec.dtype)
            # One contiguous run: HDF5 reads it as one hyperslab straight into `out`, Zarr as
            # whole chunks, a .npy memory-map as one copy.
            source.read(spec.name, rows, out)
            chunk[spec.name] = out
        yield chunk
