"""HDF5 files as a source: every dataset whose first axis is the sample axis is a field.

Three h5py pitfalls decide the shape of this module (a per-batch reader often hits all of them):

* fancy indices must be increasing and unique, and each index in a list costs about 3 µs
  (a selection block per row), so ``read`` plans its reads: dense runs become one slice each,
  and only the isolated rows left over go through one fancy selection (see ``_plan``);
* the default chunk cache is 1 MiB *per dataset*: a chunk bigger than that is not cached, so
  reading it row by row decompresses the whole chunk again for every row (``_cache_settings``);
* an HDF5 handle must not cross a fork: the library state and the file position are per
  process. Each process opens its own handle, lazily, on first use (``_handle``).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from trainmedic.data.sources.base import (
    Source,
    check_request,
    scanned_fields,
)
from trainmedic.errors import FieldError, SourceError, require

# Read planning. Measured with h5py 3.16 / HDF5 2.0, page cache warm, 256 sorted rows per read
# (throwaway scripts, 2-core VM): one fancy selection costs 1-3 µs per isolated row (10-30 µs for
# 4 KiB rows in an unfiltered chunked dataset) and ~0.4 µs per row inside a run; one slice read
# costs ~10 µs through the low-level API (~38 µs through Dataset.read_direct, which rebuilds
# the selection in Python) plus the copy. Reading each run with Dataset.read_direct took
# 10-12 ms for 256 random rows of 1 M where one fancy selection took 0.5-2.5 ms, so isolated
# rows go through one fancy selection; a group of SLICE_MIN_ROWS rows or more, at most
# MAX_GAP_ROWS and GAP_BYTES apart, is read as one covering slice and taken from. Against one
# fancy selection for everything: 256 rows in a 1024-row window 0.25 -> 0.09 ms (64 B rows,
# contiguous), 0.46 -> 0.05 ms (64 B, chunked), 7.7 -> 1.0 ms (4 KiB, chunked); 4 runs of 64
# rows 7.8 -> 0.3 ms (4 KiB, chunked); random rows unchanged within noise. Smaller settings
# (4 rows, 4-32 KiB, 4-16 rows) were up to 2-6x slower than fancy alone on short runs.
# MAX_GAP_ROWS also bounds the covering buffer for tiny rows to 1 + 32 times the rows asked.
SLICE_MIN_ROWS = 16
GAP_BYTES = 64 * 1024
MAX_GAP_ROWS = 32

# Chunk cache: HDF5 gives every open dataset its own cache with the file's settings.
CACHE_CHUNKS = 4
MIN_CACHE_BYTES = 4 * 1024 * 1024
MAX_CACHE_BYTES = 256 * 1024 * 1024

_PURPOSE = "Reading an HDF5 file"


def _h5py() -> Any:
    return require("h5py", "hdf5", _PURPOSE)


class _Handle(NamedTuple):
    pid: int
    file: Any
    datasets: dict[str, Any]


class Hdf5Source(Source):
    """Fields of an HDF5 file, read lazily through one read-only handle per process."""

    kind = "hdf5"
    random_access = True

    def __init__(self, path: str | os.PathLike[str], fields: list[str] | None = None) -> None:
        self.description = str(path)
        self.path = Path(path).expanduser().resolve()
        where = f"HDF5 file {self.description}"
        datasets, scalars = _scan(self.path, self.description)
        self.specs, self.length = scanned_fields(datasets, scalars, fields, where)
        chunks = {s.name: datasets[s.name]["chunks"] for s in self.specs}
        self.chunk_length = max((c[0] for c in chunks.values() if c), default=1)
        # Unfiltered chunked datasets skip the chunk cache (see _open_dataset); the rest share
        # the file's setting, sized for the filtered ones.
        self._bypass = {s.name: bool(chunks[s.name]) and not datasets[s.name]["filtered"] for s in self.specs}
        self._cache = _cache_settings(
            [
                int(np.prod(chunks[s.name], dtype=np.int64)) * s.dtype.itemsize
                for s in self.specs
                if datasets[s.name]["filtered"]
            ]
        )
        self._gap_rows = {s.name: min(MAX_GAP_ROWS, GAP_BYTES // max(1, s.sample_bytes)) for s in self.specs}
        self._specs_by_name = {s.name: s for s in self.specs}
        self._state: _Handle | None = None
        self._lock = threading.Lock()
        _LIVE.add(self)

    # -- the per-process handle -------------------------------------------------------------

    @property
    def handle_pid(self) -> int | None:
        """The process that opened the current handle, or None when none is open."""
        return None if self._state is None else self._state.pid

    @property
    def file(self) -> Any:
        """This process's read-only ``h5py.File``, opened on first use (for attributes, checks)."""
        return self._handle().file

    @property
    def cache_settings(self) -> tuple[int, int]:
        """(rdcc_nbytes, rdcc_nslots) the file is opened with."""
        return self._cache

    def _handle(self) -> _Handle:
        state, pid = self._state, os.getpid()
        if state is not None and state.pid == pid:
            return state
        with self._lock:
            state = self._state
            if state is not None and state.pid == pid:
                return state
            # A handle from another pid was inherited through fork: drop it without using it.
            # Closing it here would only touch this process's copy of the library state.
            self._state = None
            nbytes, nslots = self._cache
            try:
                handle = _h5py().File(self.path, "r", rdcc_nbytes=nbytes, rdcc_nslots=nslots)
            except OSError as exc:
                raise SourceError(f"cannot open HDF5 file {self.description}: {exc}") from exc
            try:
                datasets = {
                    name: _open_dataset(handle, name, bypass) for name, bypass in self._bypass.items()
                }
            except KeyError as exc:
                handle.close()
                raise SourceError(
                    f"HDF5 file {self.description} changed since it was opened: {exc}. "
                    f"Create the source again."
                ) from exc
            self._state = _Handle(pid, handle, datasets)
            return self._state

    def _dataset(self, field: str) -> Any:
        datasets = self._handle().datasets
        if field not in datasets:
            raise FieldError(f"field {field!r} is not served by {self!r}; it has {list(self.fields)}.")
        return datasets[field]

    def close(self) -> None:
        with self._lock:
            state, self._state = self._state, None
        if state is not None and state.pid == os.getpid():
            state.file.close()

    def _after_fork(self) -> None:
        # A lock held by another thread of the parent at fork time would stay locked forever.
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_state"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _LIVE.add(self)

    # -- the Source protocol -----------------------------------------------------------------

    def fingerprint(self) -> str:
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise SourceError(f"HDF5 file {self.description} is gone: {exc}") from exc
        return f"hdf5:{self.path}:{stat.st_size}:{stat.st_mtime_ns}"

    def iter_chunks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        if rows < 1:
            raise ValueError(f"rows={rows}: iter_chunks needs at least 1 row per chunk.")
        assert self.length is not None
        for start in range(0, self.length, rows):
            stop = min(start + rows, self.length)
            chunk = {}
            for spec in self.specs:
                block = np.empty((stop - start,) + spec.shape, dtype=spec.dtype)
                # Looked up per chunk, so a generator carried across a fork reopens in the child.
                self._dataset(spec.name).read_direct(block, np.s_[start:stop], np.s_[0 : stop - start])
                chunk[spec.name] = block
            yield chunk

    def read(self, field: str, indices: np.ndarray, out: np.ndarray) -> None:
        dataset = self._dataset(field)
        spec = self._specs_by_name[field]
        indices = np.asarray(indices, dtype=np.int64)
        check_request(spec, indices, out, self.length, self.description)
        if indices.size == 0:
            return
        direct = out.flags.c_contiguous and out.flags.writeable
        target = out if direct else np.empty(out.shape, dtype=out.dtype)
        spans, loose = _plan(indices, self._gap_rows[field])
        h5s = _h5py().h5s
        for first, stop, a, b in spans:
            if stop - first == b - a:
                _read_slice(h5s, dataset, first, target[a:b])
            else:
                block = np.empty((stop - first,) + spec.shape, dtype=out.dtype)
                _read_slice(h5s, dataset, first, block)
                np.take(block, indices[a:b] - first, axis=0, out=target[a:b])
        if loose.size == indices.size:
            dataset.read_direct(target, indices)
        elif loose.size:
            block = np.empty((loose.size,) + spec.shape, dtype=out.dtype)
            dataset.read_direct(block, indices[loose])
            target[loose] = block
        if not direct:
            out[...] = target


# Sources alive in this process, so that a fork can give each a fresh lock in the child.
_LIVE: weakref.WeakSet[Hdf5Source] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for source in list(_LIVE):
        source._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _scan(path: Path, description: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Every dataset in the file: {name: shape, dtype, chunks} for arrays, {name: what} for scalars."""
    h5py = _h5py()
    if not path.exists():
        raise SourceError(f"HDF5 file {description} does not exist; expected an .h5/.hdf5 file.")
    if not path.is_file():
        raise SourceError(f"{description} is not a file; expected an HDF5 (.h5/.hdf5) file.")
    if not h5py.is_hdf5(path):
        raise SourceError(
            f"{description} is not an HDF5 file (no HDF5 signature); expected a file written by "
            f"h5py or the HDF5 library."
        )
    datasets: dict[str, dict[str, Any]] = {}
    scalars: dict[str, str] = {}

    def visit(name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset):
            return
        if obj.shape is None or len(obj.shape) == 0:
            scalars[name] = "empty" if obj.shape is None else "0-d"
        else:
            # Numbers are served in native byte order (HDF5 converts while reading): a tensor
            # cannot hold big-endian data, and h5py tags bools and enums with dtype metadata.
            dtype = obj.dtype
            if dtype.kind in "biufc":
                dtype = np.dtype(dtype.str).newbyteorder("=")
            filtered = obj.chunks is not None and obj.id.get_create_plist().get_nfilters() > 0
            datasets[name] = {
                "shape": tuple(obj.shape),
                "dtype": dtype,
                "chunks": obj.chunks,
                "filtered": filtered,
            }

    try:
        with h5py.File(path, "r") as handle:
            handle.visititems(visit)
    except OSError as exc:
        raise SourceError(f"cannot open HDF5 file {description}: {exc}") from exc
    return datasets, scalars


def _open_dataset(handle: Any, name: str, bypass_cache: bool) -> Any:
    """Open one dataset; an unfiltered chunked one without a chunk cache.

    Measured (h5py 3.16, 256 random rows of a 1 M x 64 float32 dataset in 256 KiB chunks):
    11 ms with a 64 MiB cache, 10 ms with the default 1 MiB, 3 ms with none. Without filters
    HDF5 then reads only the rows asked for straight into the destination instead of pulling
    every chunk touched through the cache; with filters the chunk must be decoded whole anyway
    and the cache keeps it for the next read."""
    if not bypass_cache:
        return handle[name]
    # The cache belongs to the dataset, not the identifier: it must be set by the first open.
    h5py = _h5py()
    access = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    access.set_chunk_cache(521, 0, 0.75)
    return h5py.Dataset(h5py.h5d.open(handle.id, name.encode(), dapl=access))


def _cache_settings(chunk_bytes: list[int]) -> tuple[int, int]:
    """(rdcc_nbytes, rdcc_nslots) for datasets with these chunk sizes.

    A chunk that does not fit the cache is decompressed again for every read that touches it:
    16 slice reads inside one 4 MiB gzip chunk took 345 ms with the default 1 MiB cache and
    22 ms with 16 MiB (h5py 3.16). One read walks its rows in increasing order, so a few
    chunks per dataset are enough (the one being read, the next, and a partial one shared
    with the previous call); the cache is per dataset, hence the largest chunk, not a sum.
    HDF5 hashes chunks into nslots slots and wants a prime about 100x the chunks that fit."""
    largest = max(chunk_bytes, default=0)
    nbytes = min(MAX_CACHE_BYTES, max(MIN_CACHE_BYTES, CACHE_CHUNKS * largest))
    fit = nbytes // max(1, min(chunk_bytes, default=nbytes))
    return int(nbytes), _next_prime(max(521, min(100 * fit, 1_000_000)))


def _next_prime(n: int) -> int:
    def is_prime(k: int) -> bool:
        return k > 1 and all(k % d for d in range(2, int(k**0.5) + 1))

    while not is_prime(n):
        n += 1
    return n


def _plan(indices: np.ndarray, gap_rows: int) -> tuple[list[tuple[int, int, int, int]], np.ndarray]:
    """Split sorted unique rows into slice reads and the loose rows left for one fancy read.

    Returns the spans (first row, stop row, first and stop position in ``indices``), each
    covering rows at most ``gap_rows`` apart and holding at least SLICE_MIN_ROWS of them, and
    the positions in ``indices`` of every other row."""
    breaks = np.flatnonzero(np.diff(indices) > gap_rows + 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [indices.size]))
    counts = stops - starts
    big = counts >= SLICE_MIN_ROWS
    spans = [
        (int(indices[a]), int(indices[b - 1]) + 1, int(a), int(b)) for a, b in zip(starts[big], stops[big])
    ]
    loose = np.flatnonzero(np.repeat(~big, counts))
    return spans, loose


def _read_slice(h5s: Any, dataset: Any, first: int, dest: np.ndarray) -> None:
    """Read rows first..first+len(dest) into the C-contiguous ``dest`` with one H5Dread."""
    file_space = dataset.id.get_space()
    file_space.select_hyperslab((first,) + (0,) * (dest.ndim - 1), dest.shape)
    dataset.id.read(h5s.create_simple(dest.shape), file_space, dest)
