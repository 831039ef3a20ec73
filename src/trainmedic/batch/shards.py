"""The output folder of a generation job: shards written atomically, and the manifest that
makes a re-run resume at the first missing shard.

Layout of ``out/``::

    trainmedic-batch.json      the manifest (format trainmedic.batch/1): the job, the fields,
                               every finished shard with its rows and file sizes
    shard-000000/x.npy ...     one folder of .npy files per shard   (storage "npy")
    shard-000000.h5            or one HDF5 file per shard           (storage "hdf5")
    shard-000000.zarr/         or one Zarr store per shard          (storage "zarr")

A shard is written under a temporary name, synced, renamed into place, and only then listed in
the manifest (itself written to a temporary file, synced and renamed). A kill at any moment
leaves either the old manifest or the new one, and every shard a manifest lists is whole.
Shard boundaries are fixed by the job (``shard_size`` is kept in the manifest), and every
sample's draws by its index, so the shards of a resumed run are byte-identical to those of a run
never stopped. ``trainmedic.data.load(out)`` reads the folder as one dataset.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic._os import TEMP_PREFIX, abandoned, fsync_dir, remove_path, temp_sibling, write_text_atomically
from trainmedic.data.shard_format import FORMAT, MANIFEST, STORAGES, read_manifest, shard_path
from trainmedic.errors import BatchError, require

__all__ = ["FORMAT", "MANIFEST", "STORAGES", "ShardStore", "read_manifest", "shard_path"]


class ShardStore:
    """One job's output folder: which shards are done, and the atomic writing of the next one."""

    def __init__(
        self,
        out: str | os.PathLike,
        job: dict,
        samples: int,
        layout: Callable[[], tuple[int, int]],
        storage: str,
    ) -> None:
        """``layout`` gives (samples per shard, samples per call); it is asked only for a new job:
        a resumed one keeps the manifest's."""
        if storage not in STORAGES:
            raise BatchError(f"format={storage!r} is not a shard format; use one of {list(STORAGES)}.")
        if storage == "hdf5":
            require("h5py", "hdf5", "Writing HDF5 shards")
        elif storage == "zarr":
            require("zarr", "zarr", "Writing Zarr shards")
        self.out = Path(out)
        self.storage = storage
        self.resumed = False
        existing = self._check_folder(job)
        if existing is not None:
            # The first run fixed the shard boundaries and call sizes; a re-run keeps them whatever
            # it would pick now, or its shards would not line up with the ones on disk.
            self.manifest = existing
            self.resumed = bool(existing["shards"])
        else:
            shard_size, batch_size = layout()
            self.manifest = {
                "format": FORMAT,
                "job": job,
                "samples": samples,
                "shard_size": int(shard_size),
                "batch_size": int(batch_size),
                "storage": storage,
                "fields": None,
                "shards": [],
                "complete": False,
            }
            try:
                self.out.mkdir(parents=True, exist_ok=True)
                self._write_manifest()
            except OSError as exc:
                raise BatchError(
                    f"out={str(self.out)!r} cannot be written ({exc.strerror or exc}); give a folder this process can write."
                ) from exc

    @property
    def shard_size(self) -> int:
        return int(self.manifest["shard_size"])

    @property
    def batch_size(self) -> int:
        return int(self.manifest["batch_size"])

    @property
    def samples(self) -> int:
        return int(self.manifest["samples"])

    @property
    def shard_count(self) -> int:
        return -(-self.samples // self.shard_size)

    def bounds(self, index: int) -> tuple[int, int]:
        start = index * self.shard_size
        return start, min(start + self.shard_size, self.samples)

    def missing(self) -> list[int]:
        """Shards still to write: not listed, or listed but gone or cut short on disk."""
        done = {entry["index"] for entry in self.manifest["shards"] if self._intact(entry)}
        return [i for i in range(self.shard_count) if i not in done]

    def write(self, index: int, arrays: dict[str, np.ndarray]) -> None:
        """Write shard ``index`` atomically, then list it in the manifest."""
        start, stop = self.bounds(index)
        fields = {
            name: {"dtype": np.dtype(a.dtype).str, "shape": list(a.shape[1:])} for name, a in arrays.items()
        }
        if self.manifest["fields"] is None:
            self.manifest["fields"] = fields
        elif fields != self.manifest["fields"]:
            raise BatchError(
                f"shard {index} (samples {start}..{stop - 1}) has fields {_describe(fields)} but the earlier shards have "
                f"{_describe(self.manifest['fields'])}; a generator must return one dtype and shape for every sample."
            )
        for name, array in arrays.items():
            if array.shape[0] != stop - start:
                raise BatchError(
                    f"output {name!r} of shard {index} has {array.shape[0]} rows; expected {stop - start}."
                )
        final = shard_path(self.out, self.storage, index)
        tmp = temp_sibling(final)
        remove_path(tmp)
        try:
            _WRITERS[self.storage](tmp, arrays)
            if final.exists():  # written before a kill, never listed: same job, same content
                remove_path(final)
            os.replace(tmp, final)
            fsync_dir(self.out)
            entry = {"index": index, "name": final.name, "start": start, "stop": stop, "bytes": _sizes(final)}
            shards = sorted(
                [e for e in self.manifest["shards"] if e["index"] != index] + [entry],
                key=lambda e: e["index"],
            )
            self._write_manifest({**self.manifest, "shards": shards})
        except OSError as exc:
            # A full disk (or quota, or a file-size limit): the listed shards and the manifest are
            # as they were, and the half-written shard is gone.
            raise BatchError(
                f"writing shard {index} (samples {start}..{stop - 1}) to {str(self.out)!r} failed: {exc.strerror or exc}; "
                f"the {len(self.manifest['shards'])} shards written before it are intact. Free space and run the same "
                f"call again to resume."
            ) from exc
        finally:
            remove_path(tmp)
        self.manifest["shards"] = shards

    def finish(self) -> None:
        if not self.manifest["complete"] and not self.missing():
            try:
                self._write_manifest({**self.manifest, "complete": True})
            except OSError as exc:
                raise BatchError(
                    f"every shard is in {str(self.out)!r} but its manifest could not be marked complete "
                    f"({exc.strerror or exc}); free space and run the same call again."
                ) from exc
            self.manifest["complete"] = True

    # -- internals ----------------------------------------------------------------------------

    def _check_folder(self, job: dict) -> dict | None:
        if not self.out.exists():
            return None
        if not self.out.is_dir():
            raise BatchError(f"out={str(self.out)!r} is a file; give a folder (new or empty) for the shards.")
        # Temporary shards of writers that died mid-write (a SIGKILL), and the temporary manifest of
        # one killed during the very first manifest write; a live writer's are kept.
        for path in self.out.glob(f"{TEMP_PREFIX}*"):
            if abandoned(path):
                remove_path(path)
        manifest = read_manifest(self.out)
        if manifest is None:
            others = sorted(p.name for p in self.out.iterdir())
            if others:
                raise BatchError(
                    f"out={str(self.out)!r} already holds {len(others)} entries that are not a trainmedic.batch job "
                    f"(e.g. {others[0]!r}); nothing was written. Give a new or empty folder."
                )
            return None
        differences = _differences(manifest.get("job", {}), job)
        if manifest.get("storage") != self.storage:
            differences.append(f"format {manifest.get('storage')!r} there, {self.storage!r} now")
        if differences:
            raise BatchError(
                f"out={str(self.out)!r} holds the shards of another job ({'; '.join(differences)}); nothing was "
                f"overwritten. Give another out= folder, or delete this one to start over."
            )
        return manifest

    def _intact(self, entry: dict) -> bool:
        path = self.out / entry["name"]
        return path.exists() and _sizes(path) == entry["bytes"]

    def _write_manifest(self, manifest: dict | None = None) -> None:
        text = json.dumps(self.manifest if manifest is None else manifest, indent=1, sort_keys=True)
        write_text_atomically(self.out / MANIFEST, text, durable=True)


def _differences(old: dict, new: dict) -> list[str]:
    labels = {
        "function": "function",
        "source_sha256": "the function's source",
        "params_sha256": "the params' values",
        "params": "the params' names, dtypes or shapes",
        "samples": "number of samples",
        "seed": "seed",
        "keep_params": "keep_params",
    }
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            label = labels.get(key, key)
            if key in ("function", "samples", "seed", "keep_params"):
                out.append(f"{label} {old.get(key)!r} there, {new.get(key)!r} now")
            else:
                out.append(f"{label} changed")
    return out


def _describe(fields: dict) -> str:
    return ", ".join(f"{n}: {np.dtype(f['dtype']).name} {tuple(f['shape'])}" for n, f in fields.items())


def _sizes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _fsync_tree(path: Path) -> None:
    for item in sorted(path.rglob("*")):
        if item.is_file():
            with open(item, "rb") as f:
                os.fsync(f.fileno())
    for folder in sorted({p.parent for p in path.rglob("*")} | {path}):
        fsync_dir(folder)


def _write_npy(path: Path, arrays: dict[str, np.ndarray]) -> None:
    path.mkdir()
    for name, array in arrays.items():
        with open(path / f"{name}.npy", "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
    fsync_dir(path)


def _write_hdf5(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import h5py

    # No timestamps in the object headers: a resumed job's files are byte-identical.
    with h5py.File(path, "w", track_order=False) as f:
        for name, array in arrays.items():
            f.create_dataset(name, data=array, track_times=False)
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_zarr(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    for name, array in arrays.items():
        target = root.create_array(name, shape=array.shape, dtype=array.dtype, chunks=array.shape or "auto")
        target[...] = array
    _fsync_tree(path)


_WRITERS: dict[str, Any] = {"npy": _write_npy, "hdf5": _write_hdf5, "zarr": _write_zarr}
