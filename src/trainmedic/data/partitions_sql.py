"""SQL key ranges: one query split into ranges of an integer key column (``partition_by=``).

Each partition runs ``SELECT * FROM (<query>) WHERE key >= lo AND key < hi ORDER BY key``, so
the partitions laid end to end are the query's rows in key order. That is the order a serial
read of the query has only when the query itself ends with ``ORDER BY key`` and the key is
unique and never NULL, so all three are checked (the cache must be the very one ``data.load``
builds from the same query); the ORDER BY check is textual, the other two are counted by the
query that sizes the partitions.

Costs on the database, once per build: one query for the column names (``WHERE 1 = 0``, no
rows), one for ``min``/``max`` of the key (an index lookup on a primary key), the first 1,024
rows of the query (what a serial read decodes its dtypes and shapes from, read the same way
here so both agree), and one ``GROUP BY`` over the key that gives every partition its row count
(its rows' place in the cache files is the sum of the counts before it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from trainmedic.data.partition_model import Partition, Recipe, Split
from trainmedic.data.sources.base import DEFAULT_CHUNK_BYTES, FieldSpec, Source
from trainmedic.data.sources.sql import FIRST_CHUNK_ROWS, SqlSource
from trainmedic.errors import FieldError, SourceError

#: Rows a worker fetches at a time: bounds the Python row objects held at once, not just bytes.
MAX_FETCH_ROWS = 16384


def sql_recipe(given: Any, source: SqlSource, fields: Any, schema: dict | None, key: str | None) -> Recipe:
    if not isinstance(given, str):
        raise SourceError(
            f"build_cache opens an SQL source again in each worker, from its URL: pass the URL string "
            f"and query= (as to data.load), not an opened {type(given).__name__} ({source.description})."
        )
    if key is None:
        raise SourceError(
            f"build_cache splits an SQL query into ranges of an integer key column, but partition_by= "
            f"is missing for {source.description}; pass the column, e.g. partition_by='id' (the "
            f"table's primary key), and end the query with ORDER BY id."
        )
    if not isinstance(key, str) or not key:
        raise SourceError(f"partition_by={key!r} is not a column name; pass one, e.g. partition_by='id'.")
    ordered = rf"\border\s+by\s+(?:[\w\"`\[\]]+\.)?[\"`\[]?{re.escape(key)}[\"`\]]?(?:\s+asc)?\s*;?\s*$"
    if not re.search(ordered, source.query, flags=re.IGNORECASE):
        raise SourceError(
            f"partition_by={key!r} writes the rows in {key} order, but the query does not end with "
            f"ORDER BY {key} ({source.description}); a serial data.load of it could serve another "
            f"order and the two caches would differ. End query= with ORDER BY {key}, and load the "
            f"cache later with that same query."
        )
    quoted = source._engine.dialect.identifier_preparer.quote(key)
    names = (fields,) if isinstance(fields, str) else None if fields is None else tuple(fields)
    path = source._sqlite_path()
    if path is not None and not path.is_absolute():
        # A worker's working directory is not the caller's (Ray starts it elsewhere).
        given = source._url.set(database=str(path.resolve())).render_as_string(hide_password=False)
    return Recipe("sql", given, names, query=_bare(source.query), schema=schema, key=key, key_sql=quoted)


def split_sql(source: SqlSource, recipe: Recipe, count: int) -> Split:
    key, k, query = recipe.key, recipe.key_sql, recipe.query
    columns, _ = _fetch(source, f"SELECT * FROM ({query}) AS _tm WHERE 1 = 0", "listing the query's columns")
    if key not in columns:
        raise SourceError(
            f"partition_by={key!r} is not a column of the query's result on {source.url}; its columns "
            f"are {columns}. Name an integer column that orders the rows (the primary key; add it to "
            f"the SELECT list if it is missing)."
        )
    _, [(lo, hi)] = _fetch(
        source, f"SELECT min(_tm.{k}), max(_tm.{k}) FROM ({query}) AS _tm", f"min/max of {key}"
    )
    if lo is None:
        raise SourceError(
            f"the query returned no rows (or only NULL {key}) on {source.url}: {source.description}."
        )
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
        raise SourceError(
            f"partition_by={key!r} holds {type(lo).__name__} values ({lo!r}..{hi!r}) in the query's "
            f"result on {source.url}; build_cache splits rows into ranges of an integer key. Name an "
            f"integer column (the primary key), or cast it in the query: CAST({key} AS BIGINT) AS {key}."
        )
    specs = _peek_specs(source)
    width = -(-(hi - lo + 1) // max(1, count))
    # Exact on every SQL dialect: "/" of integers truncates on PostgreSQL and SQLite but is a
    # decimal on MySQL; subtracting the remainder first makes the quotient whole everywhere.
    bucket = f"(_tm.{k} - {lo} - (_tm.{k} - {lo}) % {width}) / {width}"
    _, groups = _fetch(
        source,
        f"SELECT {bucket}, count(*), count(DISTINCT _tm.{k}) FROM ({query}) AS _tm GROUP BY {bucket}",
        f"counting the rows per range of {key}",
    )
    counts: dict[int, int] = {}
    for part, rows, distinct in groups:
        if part is None:
            raise SourceError(
                f"partition_by={key!r} is NULL in {rows} rows of the query's result on {source.url}; "
                f"such rows fall in no key range. Skip them with WHERE {key} IS NOT NULL, or name "
                f"another column."
            )
        if distinct != rows:
            raise SourceError(
                f"partition_by={key!r} is not unique in the query's result on {source.url}: {rows} rows "
                f"hold only {distinct} values between {lo + int(part) * width} and "
                f"{lo + (int(part) + 1) * width - 1}; rows sharing a key have no fixed order, so the "
                f"cache could differ from a serial read. Partition by a unique key (the primary key)."
            )
        counts[int(part)] = int(rows)
    partitions: list[Partition] = []
    start = 0
    for p in sorted(counts):
        rows = counts[p]
        partitions.append(
            Partition(len(partitions), start, start + rows, lo + p * width, lo + (p + 1) * width)
        )
        start += rows
    return Split(tuple(partitions), specs, start)


def partition_source(recipe: Recipe, part: Partition) -> SqlSource:
    k = recipe.key_sql
    query = (
        f"SELECT * FROM ({recipe.query}) AS _tm_part WHERE _tm_part.{k} >= {part.key_lo} "
        f"AND _tm_part.{k} < {part.key_hi} ORDER BY _tm_part.{k}"
    )
    fields = list(recipe.fields) if recipe.fields is not None else None
    return SqlSource(recipe.target, query, fields=fields, schema=recipe.schema)


def read_sql_partition(source: Source, specs: tuple[FieldSpec, ...]) -> Iterator[dict[str, np.ndarray]]:
    sample_bytes = max(1, sum(s.sample_bytes for s in specs))
    rows = max(1, min(MAX_FETCH_ROWS, DEFAULT_CHUNK_BYTES // sample_bytes))
    for chunk in source.iter_chunks(rows):
        yield {spec.name: _conform(spec, chunk[spec.name]) for spec in specs}


def _conform(spec: FieldSpec, values: np.ndarray) -> np.ndarray:
    """A partition's column in the dtype and shape the query's first rows gave (what a serial read
    keeps for the whole query); a partition decodes on its own and may start with other values."""
    if values.shape[1:] != spec.shape:
        raise FieldError(
            f"field {spec.name!r} has shape {values.shape[1:]} in this partition but {spec.shape} in the "
            f"query's first rows; a tensor needs one shape per field: declare it in schema= or fix the rows."
        )
    if values.dtype == spec.dtype:
        return values
    if not np.can_cast(values.dtype, spec.dtype, "same_kind"):
        raise FieldError(
            f"field {spec.name!r} holds {values.dtype} values in this partition but {spec.dtype} in the "
            f"query's first rows; declare its dtype with schema={{{spec.name!r}: '{values.dtype.name}'}} "
            f"or CAST it in the query."
        )
    return values.astype(spec.dtype)


def _peek_specs(source: SqlSource) -> tuple[FieldSpec, ...]:
    # The serial read takes dtypes and shapes from its first FIRST_CHUNK_ROWS rows; so does this.
    rows = source.iter_chunks(FIRST_CHUNK_ROWS)
    try:
        next(rows)
    finally:
        rows.close()
    return source.specs


def _fetch(source: SqlSource, sql: str, what: str) -> tuple[list[str], list[tuple]]:
    """Column names and all rows of a small planning query, on the source's own engine."""
    sa = source._sa
    source._check_sqlite_file()
    try:
        with source._engine.connect() as conn:
            result = conn.execute(sa.text(sql))
            return list(result.keys()), [tuple(row) for row in result.fetchall()]
    except sa.exc.SQLAlchemyError as exc:
        raise source._error(
            f"{what} for build_cache failed on",
            exc,
            f"build_cache ran: {sql}\nFix query= or partition_by= so that this runs.",
        ) from exc
    finally:
        source._engine.dispose()


def _bare(query: str) -> str:
    """The query without a trailing semicolon, to nest it as a subquery."""
    return query.strip().rstrip(";").rstrip()
