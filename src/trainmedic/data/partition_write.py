"""Writing one partition's rows into a cache's preallocated field files, and the CRC-32 blocks.

The cache format (``cache.py``) checks each field file in CRC-32 blocks of ``BLOCK_BYTES``;
partitions end at row boundaries, which fall anywhere inside a block. A worker therefore returns
the CRCs of the blocks that lie wholly inside the bytes it wrote (the file's short last block
included), and the driver reads back and checksums the rest: at most one block per partition
boundary and field, a few MiB per partition, where shipping rows back or aligning partitions to
blocks of every field at once (different row sizes) would cost far more. The result is exactly
the list a serial build computes while writing the whole file front to back.

Writes are ``pwrite`` at the partition's byte offset: no worker touches another's bytes, and a
task Ray retries after a crash writes the same bytes again.
"""

from __future__ import annotations

import errno
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainmedic.data.cache import BLOCK_BYTES
from trainmedic.data.partition_model import Partition, Recipe
from trainmedic.data.partitions import open_partition, read_partition
from trainmedic.data.sources.base import FieldSpec
from trainmedic.errors import FieldError, SourceError


@dataclass(frozen=True)
class FieldFile:
    """Where a field's rows go: its file in the build folder and its size when complete."""

    spec: FieldSpec
    file: str
    total_bytes: int


class OwnedBlocks:
    """CRC-32 of the whole blocks inside bytes ``first..stop-1`` of a file of ``total`` bytes,
    fed those bytes in order in pieces of any size."""

    def __init__(self, first: int, stop: int, total: int, block: int = BLOCK_BYTES) -> None:
        self.block = block
        self.total = total
        self.index = -(-first // block)  # the first block that starts inside the range
        self.skip = min(self.index * block, stop) - first  # bytes of the block before it
        self.crc = 0
        self.filled = 0
        self.blocks: dict[int, int] = {}

    def update(self, data: memoryview) -> None:
        if self.skip:
            taken = min(self.skip, len(data))
            data, self.skip = data[taken:], self.skip - taken
        while len(data):
            take = min(len(data), self.block - self.filled)
            self.crc = zlib.crc32(data[:take], self.crc)
            self.filled += take
            data = data[take:]
            if self.filled == self.block:
                self.blocks[self.index] = self.crc
                self.index, self.crc, self.filled = self.index + 1, 0, 0

    def finish(self) -> dict[int, int]:
        # A block cut short by the range's end is whole only when the file ends there too.
        if self.filled and self.index * self.block + self.filled == self.total:
            self.blocks[self.index] = self.crc
        return self.blocks


def write_partition(
    recipe: Recipe, part: Partition, layout: list[FieldFile], folder: str, fingerprint: str | None
) -> dict[str, dict[int, int]]:
    """Read ``part`` from a freshly opened source and write it at its offsets; returns, per field,
    the CRC-32 of every block it wrote whole. Runs in a Ray worker (any process, any node)."""
    source = open_partition(recipe, part)
    fds: dict[str, int] = {}
    try:
        if fingerprint is not None and source.fingerprint() != fingerprint:
            raise SourceError(
                f"{source.description} is not the file the build was planned on (its size or "
                f"modification time differ on this node): it changed during the build, or the "
                f"nodes see different files. Build again once it is stable and the same everywhere."
            )
        specs = tuple(f.spec for f in layout)
        if recipe.kind != "sql" and tuple(source.specs) != specs:
            raise FieldError(
                f"{source.description} has fields {list(source.specs)} here, {list(specs)} when planned."
            )
        for f in layout:
            fds[f.spec.name] = _open_for_write(Path(folder) / f.file)
        crcs = {
            f.spec.name: OwnedBlocks(
                part.start * f.spec.sample_bytes, part.stop * f.spec.sample_bytes, f.total_bytes
            )
            for f in layout
        }
        row = part.start
        for chunk in read_partition(recipe, source, part, specs):
            n = len(next(iter(chunk.values())))
            if row + n > part.stop:
                raise SourceError(
                    f"{source.description} returned more than the {part.rows} rows planned for this "
                    f"partition: the data changed during the build. Build again once it is stable."
                )
            for f in layout:
                data = np.ascontiguousarray(chunk[f.spec.name]).data.cast("B")
                _pwrite_all(fds[f.spec.name], data, row * f.spec.sample_bytes)
                crcs[f.spec.name].update(data)
            row += n
        if row != part.stop:
            raise SourceError(
                f"{source.description} returned {row - part.start} of the {part.rows} rows planned for "
                f"this partition: the data changed during the build. Build again once it is stable."
            )
        for fd in fds.values():
            os.fsync(fd)
        return {name: crc.finish() for name, crc in crcs.items()}
    finally:
        for fd in fds.values():
            os.close(fd)
        source.close()


def block_crcs(path: Path, total: int, owned: dict[int, int], block: int = BLOCK_BYTES) -> list[int]:
    """Every block's CRC-32 of a complete file: ``owned`` where a worker had it, read back otherwise."""
    crcs = []
    with open(path, "rb") as f:
        for index in range(-(-total // block)):
            if index in owned:
                crcs.append(owned[index])
            else:
                f.seek(index * block)
                crcs.append(zlib.crc32(f.read(block)))
    return crcs


def _open_for_write(path: Path) -> int:
    try:
        return os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        raise SourceError(
            f"the build folder {str(path.parent)!r} is not visible from this worker (node "
            f"{os.uname().nodename}): on a Ray cluster of several machines, cache_dir= must be a "
            f"shared filesystem mounted at the same path on every node."
        ) from None


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        try:
            written = os.pwrite(fd, data, offset)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SourceError(
                    f"the disk of the cache folder is full ({exc}); free space or pass another cache_dir=."
                ) from None
            raise
        data, offset = data[written:], offset + written
