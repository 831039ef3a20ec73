"""Zarr directory stores as a source: every array whose first axis is the sample axis is a field.

A Zarr store is a directory of independently compressed chunk files, and every ``array[a:b]``
call costs ~0.3 ms of zarr machinery before any byte is decoded. So ``read`` asks once per
group of neighbouring chunks that the rows touch, chunk-aligned, and takes the rows from the
decoded block: a chunk must be decoded whole for any one of its rows anyway. Only the
``zarr.open`` / ``group.arrays()`` / ``group.groups()`` / slicing API is used, which zarr-python
2 and 3 share; zarr 3 also reads format-2 stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.data.sources.base import (
    Source,
    check_request,
    scanned_fields,
)
from trainmedic.errors import FieldError, SourceError, require

# One read() asks zarr for at most this much at a time, so 256 rows spread over a huge array
# never decode more than this in one block. Measured (zarr 3.1.6, 200 k x 64 float32 in 1024-row
# chunks, 256 rows): in a 1024-row window 1.5 ms, spread over 16 k rows 8.8 ms, over all rows
# 90 ms (200 chunks decoded); zarr's own array.oindex took 1.7, 8.5 and 78 ms.
MAX_READ_BYTES = 64 * 1024 * 1024

_PURPOSE = "Reading a Zarr store"


def _zarr() -> Any:
    return require("zarr", "zarr", _PURPOSE)


class ZarrSource(Source):
    """Arrays of a Zarr directory store (format 2 or 3), nested groups named by their path."""

    kind = "zarr"
    random_access = True

    def __init__(self, path: str | os.PathLike[str], fields: list[str] | None = None) -> None:
        self.description = str(path)
        self.path = Path(path).expanduser().resolve()
        where = f"Zarr store {self.description}"
        arrays, scalars = _scan(self.path, self.description)
        self.specs, self.length = scanned_fields(arrays, scalars, fields, where)
        # A shard is the unit a sequential reader should ask for; a chunk is what one row costs.
        self.chunk_length = max(arrays[s.name]["read_unit"] for s in self.specs)
        self._chunk_rows = {s.name: max(1, arrays[s.name]["chunks"][0]) for s in self.specs}
        self._specs_by_name = {s.name: s for s in self.specs}
        self._keys = {s.name: arrays[s.name]["key"] for s in self.specs}
        self._opened: tuple[int, dict[str, Any]] | None = None

    @property
    def handle_pid(self) -> int | None:
        """The process that opened the current arrays, or None when none are open."""
        return None if self._opened is None else self._opened[0]

    def _array(self, field: str) -> Any:
        pid = os.getpid()
        if self._opened is None or self._opened[0] != pid:
            # Per process, like the HDF5 handle: zarr resets its event loop in a forked child,
            # and opening is a few metadata reads.
            node = _open(self.path, self.description)
            self._opened = (pid, {name: node[key] if key else node for name, key in self._keys.items()})
        arrays = self._opened[1]
        if field not in arrays:
            raise FieldError(f"field {field!r} is not served by {self!r}; it has {list(self.fields)}.")
        return arrays[field]

    def close(self) -> None:
        self._opened = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_opened": None}

    def fingerprint(self) -> str:
        count, total, latest = 0, 0, 0
        try:
            for root, _dirs, files in os.walk(self.path):
                for name in files:
                    stat = os.stat(os.path.join(root, name))
                    count += 1
                    total += stat.st_size
                    latest = max(latest, stat.st_mtime_ns)
        except OSError as exc:
            raise SourceError(f"Zarr store {self.description} cannot be listed: {exc}") from exc
        if count == 0:
            raise SourceError(f"Zarr store {self.description} is gone or empty.")
        return f"zarr:{self.path}:{count}:{total}:{latest}"

    def iter_chunks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        if rows < 1:
            raise ValueError(f"rows={rows}: iter_chunks needs at least 1 row per chunk.")
        assert self.length is not None
        for start in range(0, self.length, rows):
            stop = min(start + rows, self.length)
            yield {
                spec.name: np.asarray(self._array(spec.name)[start:stop], dtype=spec.dtype)
                for spec in self.specs
            }

    def read(self, field: str, indices: np.ndarray, out: np.ndarray) -> None:
        array = self._array(field)
        spec = self._specs_by_name[field]
        indices = np.asarray(indices, dtype=np.int64)
        check_request(spec, indices, out, self.length, self.description)
        if indices.size == 0:
            return
        assert self.length is not None
        rows = self._chunk_rows[field]
        per_read = max(1, MAX_READ_BYTES // max(1, rows * spec.sample_bytes))
        for first_chunk, last_chunk in _chunk_ranges(indices // rows, per_read):
            a, b = first_chunk * rows, min((last_chunk + 1) * rows, self.length)
            lo, hi = (int(i) for i in np.searchsorted(indices, (a, b)))
            block = np.asarray(array[a:b])
            if hi - lo == b - a:
                out[lo:hi] = block
            elif block.dtype == out.dtype:
                np.take(block, indices[lo:hi] - a, axis=0, out=out[lo:hi])
            else:
                out[lo:hi] = block[indices[lo:hi] - a]


def _chunk_ranges(chunk_ids: np.ndarray, per_read: int) -> list[tuple[int, int]]:
    """Runs of consecutive touched chunks (first, last), each at most ``per_read`` chunks long."""
    touched = np.unique(chunk_ids)
    ranges = []
    for group in np.split(touched, np.flatnonzero(np.diff(touched) != 1) + 1):
        for s in range(0, group.size, per_read):
            ranges.append((int(group[s]), int(group[min(s + per_read, group.size) - 1])))
    return ranges


def _open(path: Path, description: str) -> Any:
    zarr = _zarr()
    if not path.exists():
        raise SourceError(f"Zarr store {description} does not exist; expected a Zarr directory store.")
    if not path.is_dir():
        raise SourceError(
            f"{description} is not a directory; expected a Zarr directory store (a folder with "
            f"zarr.json, or .zgroup/.zarray for format 2)."
        )
    try:
        return zarr.open(store=str(path), mode="r")
    except Exception as exc:  # zarr 2 and 3 raise KeyError, ValueError, OSError or their own errors
        raise SourceError(
            f"{description} is not a Zarr store ({type(exc).__name__}: {exc}); expected a folder with "
            f"zarr.json, or .zgroup/.zarray for format 2."
        ) from exc


def _scan(path: Path, description: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Every array in the store: {name: shape, dtype, chunks, read unit, key} and the 0-d ones."""
    node = _open(path, description)
    if hasattr(node, "arrays"):
        members = list(_walk(node, ""))
    else:
        # A store holding one array at its root (zarr.save(path, array)): the folder names it.
        members = [(path.stem, "", node)]
    arrays: dict[str, dict[str, Any]] = {}
    scalars: dict[str, str] = {}
    for name, key, array in members:
        shape = tuple(array.shape)
        if not shape:
            scalars[name] = "a 0-d array"
            continue
        dtype = np.dtype(array.dtype)
        if dtype.kind in "biufc":
            dtype = np.dtype(dtype.str).newbyteorder("=")
        chunks = tuple(array.chunks)
        shards = getattr(array, "shards", None)
        arrays[name] = {
            "shape": shape,
            "dtype": dtype,
            "chunks": chunks,
            "read_unit": max(1, (shards or chunks)[0]),
            "key": key,
        }
    return arrays, scalars


def _walk(group: Any, prefix: str) -> Iterator[tuple[str, str, Any]]:
    for name, array in group.arrays():
        yield prefix + name, prefix + name, array
    for name, child in group.groups():
        yield from _walk(child, prefix + name + "/")
