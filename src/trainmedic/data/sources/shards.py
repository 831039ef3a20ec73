"""The output folder of ``trainmedic.batch.generate``: its shards, read as one dataset.

Each shard is opened with the source of its format (a folder of ``.npy`` files, an HDF5 file,
a Zarr store) and the manifest says which rows it holds; a read of arbitrary rows is split at
the shard boundaries, so the ``stream`` tier serves a job larger than RAM without a copy.

Shards are opened when read and at most OPEN_SHARDS stay open: every memory-mapped ``.npy``
keeps a file descriptor, and a job of thousands of shards would exhaust the process's limit
(1,024 by default) if all were open at once.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trainmedic.data.shard_format import MANIFEST, read_manifest
from trainmedic.data.sources.base import Source, check_request, select_fields
from trainmedic.errors import BatchError, SourceError

__all__ = ["ShardedSource", "is_shard_folder"]

OPEN_SHARDS = 32


def is_shard_folder(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


class ShardedSource(Source):
    kind = "shards"
    random_access = True

    def __init__(self, path: str | Path, fields: list[str] | None = None) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        try:
            manifest = read_manifest(self.path)
        except BatchError as exc:
            raise SourceError(str(exc)) from None
        if manifest is None:  # open_source saw one: the folder changed since
            raise SourceError(
                f"{self.description!r} has no {MANIFEST} (any more); it is not a trainmedic.batch folder."
            )
        if not manifest.get("complete"):
            done = len(manifest.get("shards", []))
            raise SourceError(
                f"{self.description!r} is an unfinished trainmedic.batch job ({done} shards written of "
                f"{-(-manifest['samples'] // manifest['shard_size'])}); run the same batch.generate() call again to finish it."
            )
        self._manifest_text = (self.path / MANIFEST).read_bytes()
        entries = manifest["shards"]
        self._entries = entries
        self._fields = fields
        self._open: OrderedDict[int, Source] = OrderedDict()
        self._starts = np.array([entry["start"] for entry in entries] + [entries[-1]["stop"]], dtype=np.int64)
        first_specs = None
        for index, entry in enumerate(entries):
            shard = open_shard(self.path / entry["name"], fields)
            if first_specs is None:
                first_specs = shard.specs
            if shard.length != entry["stop"] - entry["start"] or shard.specs != first_specs:
                raise SourceError(
                    f"shard {entry['name']!r} of {self.description!r} does not match its manifest entry "
                    f"(rows {entry['start']}..{entry['stop']}); delete the folder and generate it again."
                )
            self._keep(index, shard)
        # A complete manifest lists at least one shard (entries[-1] above), so first_specs is set.
        self.specs = select_fields({s.name: s for s in first_specs or ()}, fields, self.description)
        self.length = int(manifest["samples"])

    def _shard(self, index: int) -> Source:
        shard = self._open.get(index)
        if shard is None:
            shard = open_shard(self.path / self._entries[index]["name"], self._fields)
            self._keep(index, shard)
        else:
            self._open.move_to_end(index)
        return shard

    def _keep(self, index: int, shard: Source) -> None:
        self._open[index] = shard
        while len(self._open) > OPEN_SHARDS:
            _, oldest = self._open.popitem(last=False)
            oldest.close()

    def fingerprint(self) -> str:
        return f"shards:{self.path.resolve()}:{hashlib.sha256(self._manifest_text).hexdigest()}"

    def iter_chunks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        for index in range(len(self._entries)):
            for chunk in self._shard(index).iter_chunks(rows):
                yield {spec.name: chunk[spec.name] for spec in self.specs}

    def read(self, field: str, indices: np.ndarray, out: np.ndarray) -> None:
        spec = next(s for s in self.specs if s.name == field)
        check_request(spec, indices, out, self.length, self.description)
        # indices are sorted: each shard's rows are one contiguous slice of them.
        cuts = np.searchsorted(indices, self._starts)
        for shard_index in range(len(self._entries)):
            a, b = int(cuts[shard_index]), int(cuts[shard_index + 1])
            if a < b:
                self._shard(shard_index).read(field, indices[a:b] - self._starts[shard_index], out[a:b])

    def close(self) -> None:
        while self._open:
            _, shard = self._open.popitem()
            shard.close()


def open_shard(path: Path, fields: list[str] | None) -> Source:
    """One shard, opened with the source of its storage (named by its suffix, as the writer names it)."""
    if path.suffix == ".h5":
        from trainmedic.data.sources.hdf5 import Hdf5Source

        return Hdf5Source(path, fields)
    if path.suffix == ".zarr":
        from trainmedic.data.sources.zarr_store import ZarrSource

        return ZarrSource(path, fields)
    from trainmedic.data.sources.arrays import NumpySource

    return NumpySource(path, fields)
