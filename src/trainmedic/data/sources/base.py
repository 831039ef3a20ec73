"""The protocol every source implements, and the checks they share.

A source describes its fields (name, dtype, per-sample shape) and can hand over its rows in
one of two ways:

* ``iter_chunks(rows)`` — sequential chunks of rows, from the first to the last. Every source
  has it; materialising into RAM, VRAM or a disk cache uses only this, so a source is read once,
  front to back, however it is stored (an SQL cursor, a Dataset, a chunked HDF5 file).
* ``read(field, indices, out)`` — arbitrary rows, given sorted and unique. Only sources with
  ``random_access`` (files and arrays, not a query or a Dataset) have it; the stream tier uses
  it to serve data larger than RAM without a copy.

Sources never print; they raise ``trainmedic.errors`` with the field and the problem named.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from trainmedic.errors import FieldError

#: Rows per chunk when a source is read front to back: big enough that per-chunk overhead
#: (a query round trip, an HDF5 selection) vanishes, small enough to show progress.
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class FieldSpec:
    """One field of a source: its name, numpy dtype and the shape of one sample."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def sample_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))

    def describe(self) -> str:
        dims = "×".join(str(d) for d in self.shape) or "scalar"
        return f"{self.name}: {np.dtype(self.dtype).name} {dims}"


class Source:
    """Base class of every source. Subclasses set the attributes in ``__init__``."""

    #: "hdf5", "zarr", "numpy", "sql", "dataset" or "dict".
    kind: str = ""
    #: What the user gave, for messages and explain(): a path, a URL without password, a class.
    description: str = ""
    #: Field specs in the order batches yield them.
    specs: tuple[FieldSpec, ...] = ()
    #: Number of samples, or None when unknown until read (an SQL query).
    length: int | None = None
    #: True when read() works on arbitrary rows without reading everything (files, arrays).
    random_access: bool = False
    #: Natural read unit along the sample axis (the HDF5/Zarr chunk length; 1 when contiguous).
    chunk_length: int = 1

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.specs)

    @property
    def sample_bytes(self) -> int:
        return sum(spec.sample_bytes for spec in self.specs)

    @property
    def nbytes(self) -> int | None:
        return None if self.length is None else self.length * self.sample_bytes

    def cache_identity(self) -> str:
        """What names this source's disk cache folder: the same source always gets the same folder,
        rebuilt in place when its fingerprint changes, so an edited file leaves no old cache behind."""
        return self.description

    #: False when fingerprint() cannot see changes inside the data (a Dataset, a server query).
    sees_changes: bool = True

    def fingerprint(self) -> str:
        """A string that changes when the data may have changed (path, size, mtime, ...).

        The disk tier keys its cache on it; a source that cannot tell returns its identity and
        the cache is then trusted until the user deletes it (explain() says so)."""
        raise NotImplementedError

    def iter_chunks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        """Yield consecutive chunks of at most ``rows`` samples, one array per field."""
        raise NotImplementedError

    def read(self, field: str, indices: np.ndarray, out: np.ndarray) -> None:
        """Read the rows ``indices`` (int64, sorted, unique) of ``field`` into ``out``."""
        raise NotImplementedError(f"{self.kind} sources are read front to back only")

    def chunk_rows(self, target_bytes: int | None = None) -> int:
        """Rows per iter_chunks() chunk: about ``target_bytes``, a multiple of chunk_length."""
        target = DEFAULT_CHUNK_BYTES if target_bytes is None else target_bytes
        rows = max(1, target // max(1, self.sample_bytes))
        if self.chunk_length > 1:
            rows = max(self.chunk_length, rows // self.chunk_length * self.chunk_length)
        return int(rows)

    def close(self) -> None:
        """Release file handles or connections; the source can be reopened by using it again."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description} {self.length} rows {list(self.fields)}>"


def select_fields(
    available: dict[str, FieldSpec], wanted: str | list[str] | tuple[str, ...] | None, where: str
) -> tuple[FieldSpec, ...]:
    """Pick ``wanted`` fields (all when None) in the order asked; an unknown name lists the known."""
    if wanted is None:
        return tuple(available.values())
    if isinstance(wanted, str):
        wanted = [wanted]
    missing = [name for name in wanted if name not in available]
    if missing:
        raise FieldError(
            f"field {missing[0]!r} is not in {where}; it has {sorted(available)}. "
            f"Pass fields= with names from that list."
        )
    if len(set(wanted)) != len(wanted):
        raise FieldError(f"fields={list(wanted)} names a field twice; name each field once.")
    return tuple(available[name] for name in wanted)


def scanned_fields(
    arrays: dict[str, dict], scalars: dict[str, str], wanted: list[str] | str | None, where: str
) -> tuple[tuple[FieldSpec, ...], int]:
    """Field specs and the common length from a file's scan: ``arrays`` maps a path to its
    ``{"dtype", "shape"}``, ``scalars`` the 0-d datasets (never fields) to a description."""
    for name in [wanted] if isinstance(wanted, str) else wanted or []:
        if name in scalars:
            raise FieldError(
                f"field {name!r} in {where} is a scalar ({scalars[name]}), not an array with one row "
                f"per sample; leave it out of fields=."
            )
    available = {
        name: FieldSpec(name, info["dtype"], tuple(info["shape"][1:]))
        for name, info in sorted(arrays.items())
    }
    specs = select_fields(available, wanted, where)
    for spec in specs:
        check_dtype(spec.name, spec.dtype, where)
    return specs, check_same_length({s.name: arrays[s.name]["shape"][0] for s in specs}, where)


def check_same_length(lengths: dict[str, int], where: str) -> int:
    """The common length of all fields, or FieldError naming the field that differs."""
    if not lengths:
        raise FieldError(f"{where} has no fields to serve; it needs at least one array.")
    first_name, first = next(iter(lengths.items()))
    for name, n in lengths.items():
        if n != first:
            raise FieldError(
                f"field {name!r} has {n} samples but {first_name!r} has {first} in {where}; "
                f"every field must have one row per sample. Select fields of the same length "
                f"with fields=."
            )
    return int(first)


def check_dtype(name: str, dtype: np.dtype, where: str) -> np.dtype:
    """Accept numeric and bool dtypes (what a torch tensor can hold); reject the rest by name."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biufc":
        # Tensors are native-endian; a big-endian file's rows are converted as they are read.
        return dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype
    raise FieldError(
        f"field {name!r} in {where} has dtype {dtype} ({_kind_name(dtype)}), which a tensor "
        f"cannot hold; store it as a numeric array (ints, floats or bools), or drop it with fields=."
    )


def _kind_name(dtype: np.dtype) -> str:
    return {
        "O": "Python objects, e.g. ragged rows or strings",
        "U": "unicode strings",
        "S": "byte strings",
        "V": "raw or structured records",
        "T": "variable-length strings",
        "M": "datetimes",
        "m": "timedeltas",
    }.get(dtype.kind, dtype.kind)


def check_request(
    spec: FieldSpec, indices: np.ndarray, out: np.ndarray, length: int | None, where: str
) -> None:
    """The checks every random-access read() makes."""
    if out.shape != (indices.size,) + spec.shape:
        raise ValueError(
            f"out has shape {out.shape} but reading {indices.size} rows of field {spec.name!r} "
            f"needs {(indices.size,) + spec.shape}."
        )
    if indices.size and (indices[0] < 0 or (length is not None and indices[-1] >= length)):
        raise IndexError(
            f"rows {int(indices[0])}..{int(indices[-1])} of field {spec.name!r} are out of range: "
            f"{where} has {length} rows."
        )


def read_rows(source: Source, field: str, indices: np.ndarray, out: np.ndarray) -> None:
    """Read rows in any order, duplicates allowed, through the sorted-unique ``Source.read``."""
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and np.all(indices[1:] > indices[:-1]):
        source.read(field, indices, out)
        return
    unique, inverse = np.unique(indices, return_inverse=True)
    buffer = np.empty((len(unique),) + out.shape[1:], dtype=out.dtype)
    source.read(field, unique, buffer)
    np.take(buffer, inverse, axis=0, out=out)


def runs(indices: np.ndarray) -> list[tuple[int, int, int]]:
    """Split sorted unique indices into contiguous runs: (first row, stop row, offset in indices).

    Reading runs instead of an index list is what makes HDF5 and Zarr reads fast: one selection
    per run instead of one per row."""
    if indices.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [indices.size]))
    return [(int(indices[a]), int(indices[b - 1]) + 1, int(a)) for a, b in zip(starts, stops)]
