"""The folder ``trainmedic.batch.generate`` writes, as both sides read it: names and manifest.

The writer (``batch.shards.ShardStore``) sits above ``data``, the reader
(``data.sources.shards``) inside it; the format they share lives here, below both.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainmedic.errors import BatchError

__all__ = ["FORMAT", "MANIFEST", "STORAGES", "read_manifest", "shard_path"]

MANIFEST = "trainmedic-batch.json"
FORMAT = "trainmedic.batch/1"
STORAGES = ("npy", "hdf5", "zarr")
_SUFFIX = {"npy": "", "hdf5": ".h5", "zarr": ".zarr"}


def shard_path(out: Path, storage: str, index: int) -> Path:
    return Path(out) / f"shard-{index:06d}{_SUFFIX[storage]}"


def read_manifest(out: Path) -> dict | None:
    """The manifest of ``out``, None when there is none; BatchError when it cannot be read."""
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BatchError(
            f"{str(path)!r} cannot be read as a trainmedic.batch manifest ({exc}); delete the folder to start over."
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BatchError(
            f"{str(path)!r} is not a {FORMAT} manifest (format {manifest.get('format') if isinstance(manifest, dict) else None!r})."
        )
    return manifest
