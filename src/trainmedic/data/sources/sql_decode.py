"""Decoding query rows into arrays: numbers, BLOB/bytea with a declared dtype and shape, arrays.

Split from ``sql.py``: the query runner there hands each fetched chunk of rows here, column by
column. What a column holds is decided from its first non-NULL value and then kept for the whole
query, so a later chunk of another type is refused instead of silently truncated.
"""

from __future__ import annotations

import datetime
import numbers
from decimal import Decimal
from typing import Any, NoReturn

import numpy as np

from trainmedic.data.sources.base import FieldSpec, check_dtype, select_fields
from trainmedic.errors import FieldError, SourceError

_BLOB = (bytes, bytearray, memoryview)
_SEQUENCE = (list, tuple)


class Decoder:
    """Turns the rows of one query run into arrays; remembers dtype and shape after chunk 1."""

    def __init__(self, keys: list[str], fields: list[str] | None, schema: dict, where: str) -> None:
        unknown = sorted(set(schema) - set(keys))
        if unknown:
            raise FieldError(
                f"schema= declares {unknown[0]!r}, which is not a column of {where}; its columns "
                f"are {keys}. Fix the name in schema= or add the column to the query."
            )
        placeholders = {key: FieldSpec(key, np.dtype(object), ()) for key in keys}
        chosen = [spec.name for spec in select_fields(placeholders, fields, where)]
        for name in chosen:
            if keys.count(name) > 1:
                raise FieldError(
                    f"{where} has {keys.count(name)} columns named {name!r}; give each a name of "
                    f"its own with AS, e.g. SELECT a.{name} AS a_{name}, b.{name} AS b_{name}."
                )
        self.names = chosen
        self.index = [keys.index(name) for name in chosen]
        self.schema = schema
        self.where = where
        self.specs: tuple[FieldSpec, ...] = ()
        self._kind: dict[str, str] = {}
        self._dtype: dict[str, np.dtype] = {}
        self._shape: dict[str, tuple[int, ...]] = {}

    def decode(self, batch, start: int) -> dict[str, np.ndarray]:
        out = {}
        for name, i in zip(self.names, self.index):
            out[name] = self._column(name, [row[i] for row in batch], start)
        if not self.specs:
            self.specs = tuple(FieldSpec(n, a.dtype, tuple(a.shape[1:])) for n, a in out.items())
        return out

    def _column(self, name: str, values: list, start: int) -> np.ndarray:
        kind = self._kind.get(name)
        if kind is None:
            first = values[0]
            if first is None:
                raise _null(name, start)
            kind = (
                "blob" if isinstance(first, _BLOB) else "array" if isinstance(first, _SEQUENCE) else "scalar"
            )
            self._kind[name] = kind
        if kind == "blob":
            return self._blob(name, values, start)
        if kind == "array":
            return self._array(name, values, start)
        return self._scalar(name, values, start)

    def _blob(self, name: str, values: list, start: int) -> np.ndarray:
        if name not in self.schema:
            raise FieldError(
                f"field {name!r} of {self.where} is a BLOB / bytea column: raw bytes, which need "
                f"a dtype and a shape to become an array. Declare them with "
                f"schema={{{name!r}: (dtype, shape)}}, e.g. schema={{{name!r}: ('float32', (64,))}}."
            )
        dtype, shape = self.schema[name]
        try:
            lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        except TypeError:
            i = next(i for i, v in enumerate(values) if not isinstance(v, _BLOB))
            if values[i] is None:
                raise _null(name, start + i) from None
            raise FieldError(
                f"field {name!r} holds bytes in its first rows but {type(values[i]).__name__} in "
                f"row {start + i} (0-based) of {self.where}; store one type per column."
            ) from None
        declared = shape is not None
        if name not in self._shape:
            if shape is None:
                if lengths[0] % dtype.itemsize:
                    raise _blob_size(name, start, int(lengths[0]), dtype, None)
                shape = (int(lengths[0]) // dtype.itemsize,)
            self._shape[name] = shape
        shape = self._shape[name]
        expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        bad = np.flatnonzero(lengths != expected)
        if bad.size:
            i = int(bad[0])
            raise _blob_size(name, start + i, int(lengths[i]), dtype, shape, declared)
        if expected == 0:
            return np.empty((len(values),) + shape, dtype=dtype)
        # bytearray.join: one copy, and frombuffer over it is writable.
        return np.frombuffer(bytearray().join(values), dtype=dtype).reshape((len(values),) + shape)

    def _array(self, name: str, values: list, start: int) -> np.ndarray:
        dtype, shape = self.schema.get(name, (None, None))
        if name not in self._shape:
            if shape is None:
                try:
                    shape = tuple(np.shape(values[0]))
                except ValueError:
                    raise _ragged(name, start, None, "nested rows of different lengths", self.where) from None
            self._shape[name] = shape
        shape = self._shape[name]
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError):
            arr = None
        if arr is None or arr.dtype.kind == "O" or arr.shape[1:] != shape:
            declared = self.schema.get(name, (None, None))[1] is not None
            self._explain_rows(
                name, values, start, shape, "declared in schema=" if declared else "as in row 0"
            )
        return self._cast(name, arr, start, dtype)

    def _explain_rows(self, name: str, values: list, start: int, shape: tuple, origin: str) -> NoReturn:
        """Raise the error that says which row breaks the array; only runs on bad data."""
        for i, value in enumerate(values):
            if value is None:
                raise _null(name, start + i)
            try:
                got = tuple(np.shape(value))
            except ValueError:
                raise _ragged(name, start + i, None, "nested rows of different lengths", self.where) from None
            if got != shape:
                raise _ragged(name, start + i, got, f"{_shape_words(shape)} ({origin})", self.where)
            if any(e is None for e in np.asarray(value, dtype=object).flat):
                raise FieldError(
                    f"field {name!r} has a NULL element in row {start + i} (0-based) of "
                    f"{self.where}; replace it in the query with array_replace({name}, NULL, 0), "
                    f"or skip such rows with WHERE array_position({name}, NULL) IS NULL."
                )
        kinds = sorted({type(e).__name__ for v in values for e in np.asarray(v, dtype=object).flat})
        raise FieldError(
            f"field {name!r} of {self.where} holds elements of types {kinds}, which do not form "
            f"one numeric array; cast them in the query or drop the column with fields=."
        )

    def _scalar(self, name: str, values: list, start: int) -> np.ndarray:
        dtype, shape = self.schema.get(name, (None, None))
        if shape not in (None, ()):
            raise FieldError(
                f"schema= declares field {name!r} with shape {shape}, but the column holds one "
                f"scalar per row in {self.where}; declare just its dtype, or store arrays in a "
                f"BLOB / array column."
            )
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError):
            arr = np.asarray(values, dtype=object)
        if arr.dtype.kind == "O" or arr.ndim != 1:
            arr = self._objects(name, values, start)
        return self._cast(name, arr, start, dtype)

    def _objects(self, name: str, values: list, start: int) -> np.ndarray:
        for i, value in enumerate(values):
            if value is None:
                raise _null(name, start + i)
        if all(isinstance(v, (numbers.Real, Decimal)) for v in values):
            return np.asarray([float(v) for v in values])  # NUMERIC / DECIMAL columns
        odd = next((v for v in values if not isinstance(v, (numbers.Real, Decimal))), values[0])
        dtype: np.dtype
        if isinstance(odd, (datetime.datetime, datetime.date)):
            dtype = np.dtype("datetime64[us]")
        elif isinstance(odd, datetime.timedelta):
            dtype = np.dtype("timedelta64[us]")
        elif isinstance(odd, str):
            dtype = np.dtype("U")
        else:
            dtype = np.dtype(object)
        self._check(name, dtype)
        raise AssertionError("unreachable: check_dtype rejects non-numeric dtypes")

    def _cast(self, name: str, arr: np.ndarray, start: int, declared: np.dtype | None) -> np.ndarray:
        self._check(name, arr.dtype)
        if name not in self._dtype:
            self._dtype[name] = declared if declared is not None else arr.dtype
        dtype = self._dtype[name]
        if declared is None and arr.dtype != dtype and not np.can_cast(arr.dtype, dtype, "same_kind"):
            raise FieldError(
                f"field {name!r} of {self.where} holds {dtype} values in its first rows but "
                f"{arr.dtype} values in rows {start}-{start + len(arr) - 1} (0-based); declare "
                f"its dtype with schema={{{name!r}: '{arr.dtype.name}'}} or CAST it in the query."
            )
        return arr.astype(dtype, copy=False)

    def _check(self, name: str, dtype: np.dtype) -> None:
        try:
            check_dtype(name, dtype, self.where)
        except FieldError as exc:
            raise FieldError(f"{exc} Or leave the column out of the query's SELECT list.") from None


def parse_schema(schema: Any) -> dict[str, tuple[np.dtype, tuple[int, ...] | None]]:
    if schema is None:
        return {}
    example = "schema={'x': ('float32', (64,)), 'y': 'int64'}"
    if not isinstance(schema, dict):
        raise SourceError(
            f"schema= must be a dict of column name to dtype or (dtype, shape), like {example}; got {schema!r}."
        )
    parsed = {}
    for name, entry in schema.items():
        shape = None
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            entry, shape = entry
            if isinstance(shape, (int, np.integer)):
                shape = (shape,)
            if not isinstance(shape, (tuple, list)) or not all(
                isinstance(d, (int, np.integer)) and d >= 0 for d in shape
            ):
                raise SourceError(
                    f"schema[{name!r}] has shape {shape!r}; a shape is a tuple of sizes like (64,) or (7, 64), as in {example}."
                )
            shape = tuple(int(d) for d in shape)
        try:
            dtype = np.dtype(entry)
        except TypeError:
            raise SourceError(
                f"schema[{name!r}] names dtype {entry!r}, which numpy does not know; use a name like 'float32', 'int64' or 'bool', as in {example}."
            ) from None
        parsed[str(name)] = (check_dtype(str(name), dtype, "schema="), shape)
    return parsed


def _null(name: str, row: int) -> FieldError:
    return FieldError(
        f"field {name!r} is NULL in row {row} (0-based) of the query's result; a tensor has no "
        f"NULL. Replace it in the query with COALESCE({name}, 0), or skip such rows with "
        f"WHERE {name} IS NOT NULL."
    )


def _blob_size(
    name: str, row: int, got: int, dtype: np.dtype, shape: tuple | None, declared: bool = True
) -> FieldError:
    if shape is None:
        return FieldError(
            f"field {name!r}: row {row} (0-based) holds {got} bytes, not a whole number of "
            f"{dtype.name} values ({dtype.itemsize} bytes each); check the dtype in schema=."
        )
    count = int(np.prod(shape, dtype=np.int64))
    origin = "schema= declares" if declared else "row 0 and the dtype in schema= make it"
    return FieldError(
        f"field {name!r}: row {row} (0-based) holds {got} bytes, but {origin} "
        f"{dtype.name} {shape}, which is {count * dtype.itemsize} bytes ({count} values of "
        f"{dtype.itemsize} bytes); fix the dtype or shape in schema=, or the rows that differ."
    )


def _ragged(name: str, row: int, got: tuple | None, expected: str, where: str) -> FieldError:
    found = "nested rows of different lengths" if got is None else _shape_words(got)
    return FieldError(
        f"field {name!r} is ragged: rows have {expected}, but row {row} (0-based) of {where} "
        f"has {found}. A tensor needs one shape per field: pad the arrays to one length in the "
        f"query, or keep rows of one length with a WHERE clause (e.g. cardinality({name}) = n)."
    )


def _shape_words(shape: tuple) -> str:
    return f"length {shape[0]}" if len(shape) == 1 else f"shape {shape}"
