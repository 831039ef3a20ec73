"""Open whatever ``data.load`` is given as a :class:`~trainmedic.data.sources.base.Source`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainmedic.data.sources.base import FieldSpec, Source
from trainmedic.errors import SourceError

__all__ = ["FieldSpec", "Source", "open_source"]

_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
_SUPPORTED = (
    "an HDF5 file (.h5/.hdf5), a Zarr store (folder), a .npy file or a folder of .npy files, "
    "a trainmedic.batch output folder, "
    "an SQLAlchemy URL with query=, a torch Dataset, or a dict of arrays"
)


def open_source(
    source: Any, fields: list[str] | None = None, query: str | None = None, schema: dict | None = None
) -> Source:
    if isinstance(source, Source):
        return source
    if isinstance(source, dict):
        from trainmedic.data.sources.arrays import ArraySource

        return ArraySource(source, fields)
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if "://" in text:
            from trainmedic.data.sources.sql import SqlSource

            return SqlSource(text, query, fields=fields, schema=schema)
        if query is not None:
            raise SourceError(
                f"query= is for SQL sources, but {text!r} is a path; give an SQLAlchemy URL such as 'sqlite:///{text}'."
            )
        return _open_path(Path(text), fields)
    if (
        hasattr(source, "__getitem__")
        and hasattr(source, "__len__")
        and not isinstance(source, (list, tuple))
    ):
        from trainmedic.data.sources.dataset import DatasetSource

        return DatasetSource(source, fields)
    raise SourceError(f"data.load cannot read a {type(source).__name__}; it takes {_SUPPORTED}.")


def _open_path(path: Path, fields: list[str] | None) -> Source:
    if not path.exists():
        raise SourceError(f"{str(path)!r} does not exist; data.load takes {_SUPPORTED}.")
    suffix = path.suffix.lower()
    from trainmedic.data.sources.shards import is_shard_folder

    if is_shard_folder(path):
        from trainmedic.data.sources.shards import ShardedSource

        return ShardedSource(path, fields)
    if path.is_file() and suffix in _HDF5_SUFFIXES:
        from trainmedic.data.sources.hdf5 import Hdf5Source

        return Hdf5Source(path, fields)
    if path.is_file() and suffix == ".npy":
        from trainmedic.data.sources.arrays import NumpySource

        return NumpySource(path, fields)
    if path.is_dir() and (
        suffix == ".zarr" or any((path / m).exists() for m in ("zarr.json", ".zgroup", ".zarray"))
    ):
        from trainmedic.data.sources.zarr_store import ZarrSource

        return ZarrSource(path, fields)
    if path.is_dir() and any(path.glob("*.npy")):
        from trainmedic.data.sources.arrays import NumpySource

        return NumpySource(path, fields)
    if path.is_file() and _looks_like_hdf5(path):
        from trainmedic.data.sources.hdf5 import Hdf5Source

        return Hdf5Source(path, fields)
    raise SourceError(f"cannot tell what {str(path)!r} holds; data.load takes {_SUPPORTED}.")


def _looks_like_hdf5(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89HDF\r\n\x1a\n"
