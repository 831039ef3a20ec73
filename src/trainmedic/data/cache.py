"""The disk tier's cache: one raw contiguous file per field plus a manifest, built once, reused.

A cache is trusted only when everything about it checks out: the manifest exists (it is written
last, and the folder is renamed into place only after every file is fsynced — so an interrupted
build leaves a ``.tmp-`` folder that is never read), the source's fingerprint still matches (the
file was not rewritten since), every field file has its recorded size (truncation), and its 4 MiB
blocks their recorded CRC-32 (corruption). A cache up to ``FULL_VERIFY_BYTES`` is checked in
full on every reuse; a bigger one in a random sample of ``SAMPLED_BLOCKS`` blocks per file, a
different sample each run: reading all of a cache larger than RAM at every start would cost as
much as the first epoch (a 378 MiB reuse spent 250 of its 277 ms on a full checksum). A damaged
cache is rebuilt, never served. The old cache is removed only after the new one is in place.

Processes that load the same source at once (the ranks of a torchrun job, on one node or on a
shared file system) build it once: the builder holds the folder's lock (``build_lock.py``), the
others wait until its manifest is published and then map the same files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from trainmedic._os import fsync_dir, pid_alive
from trainmedic.data.build_lock import Holder, build_lock, lock_path, read_holder, remove_if_stale, why_stale
from trainmedic.data.materialize import Progress, Reading
from trainmedic.data.sources.base import Source
from trainmedic.errors import SourceError

FORMAT = "trainmedic.data.cache/2"
BLOCK_BYTES = 4 * 1024 * 1024
FULL_VERIFY_BYTES = 1024**3
SAMPLED_BLOCKS = 64


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainmedic" / "data"


class DiskCache:
    """The cache folder of one source under ``root``; ``load()`` opens or (re)builds it."""

    def __init__(self, root: Path, source: Source) -> None:
        self.root = Path(root)
        self.source = source
        # The folder is named by what the source is, not by its contents: a changed source is
        # rebuilt in the same folder (the fingerprint in the manifest tells), never beside it.
        key = hashlib.blake2b(digest_size=8)
        key.update(source.cache_identity().encode())
        for spec in source.specs:
            key.update(spec.describe().encode())
        slug = (
            re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(source.description.split("?")[0]).name)[:40] or source.kind
        )
        self.folder = self.root / f"{slug}-{key.hexdigest()}"
        #: Why the last load() rebuilt (None when the cache was reused).
        self.rebuilt_because: str | None = None
        self.seconds = 0.0
        self.verify_seconds = 0.0
        #: What the last reuse checked: "every block" or "N of M blocks, sampled".
        self.verified = ""
        #: Seconds the last load() waited for another process building this cache, and who that was.
        self.waited = 0.0
        self.waited_for: Holder | None = None
        #: Why a stale build lock was taken over (None when none was).
        self.took_over: str | None = None

    def load(self, progress: Progress) -> dict[str, np.ndarray]:
        """Memory-maps of a verified cache, building it first when missing or not trustworthy."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SourceError(
                f"cannot create the cache folder {str(self.root)!r} ({exc}); pass cache_dir= a writable folder."
            ) from None
        problem = self.problem()
        if problem is None:
            return self._open()
        announced = []

        def waiting(holder: Holder) -> None:
            announced.append(holder)
            progress.start(
                f"waiting for {holder.describe()} to build the disk cache of {self.source.description}", None
            )

        try:
            for attempt in range(4):
                seen = _manifest_id(self.folder)
                # Wait for a manifest other than the one just judged (a rebuild replaces it); the
                # last attempt waits for the lock itself, in case what gets published stays unusable.
                ready = (lambda seen=seen: _manifest_id(self.folder) != seen) if attempt < 3 else None
                with build_lock(self.folder, ready=ready, on_wait=waiting) as lock:
                    self.waited += lock.waited
                    self.waited_for = lock.holder or self.waited_for
                    self.took_over = lock.took_over or self.took_over
                    problem = self.problem()  # the holder we waited for may have built it
                    if problem is None:
                        break
                    if lock.held:
                        if announced:  # the wait note's bar ends before the build's own starts
                            progress.stop()
                            announced.clear()
                        self.rebuilt_because = problem
                        self._build(progress)
                        break
        finally:
            if announced:
                progress.stop()
        return self._open()

    # -- checking -----------------------------------------------------------------------------

    def problem(self) -> str | None:
        """Why the cache on disk cannot be served as it is (None when it can)."""
        manifest_path = self.folder / "manifest.json"
        if not manifest_path.exists():
            return "no cache yet" if not self.folder.exists() else "the cache has no manifest"
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            return "the cache manifest is unreadable"
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            return "the cache was written by another version of trainmedic"
        if manifest.get("fingerprint") != self.source.fingerprint():
            return "the source changed since the cache was built"
        try:
            return self._check_files(manifest)
        except (KeyError, TypeError, ValueError):
            return "the cache manifest is malformed"

    def _check_files(self, manifest: dict) -> str | None:
        started = time.perf_counter()
        full = sum(entry["bytes"] for entry in manifest["fields"]) <= FULL_VERIFY_BYTES
        checked = total = 0
        for entry in manifest["fields"]:
            path = self.folder / entry["file"]
            if not path.exists() or path.stat().st_size != entry["bytes"]:
                size = path.stat().st_size if path.exists() else 0
                return f"{entry['file']} is truncated ({size} of {entry['bytes']} bytes)"
            blocks = entry["crc32_blocks"]
            picked = range(len(blocks)) if full else _sample(len(blocks))
            bad = _bad_block(path, blocks, picked)
            if bad is not None:
                return f"{entry['file']} is corrupted (CRC-32 mismatch in block {bad})"
            checked, total = checked + len(picked), total + len(blocks)
        self.verify_seconds = time.perf_counter() - started
        self.verified = "every block" if full else f"{checked} of {total} blocks, sampled"
        self.manifest = manifest
        return None

    def _open(self) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        length = self.manifest["length"]
        for entry in self.manifest["fields"]:
            arrays[entry["name"]] = np.memmap(
                self.folder / entry["file"],
                dtype=np.dtype(entry["dtype"]),
                mode="r",
                shape=(length, *entry["shape"]),
            )
        return arrays

    # -- building -----------------------------------------------------------------------------

    def _build(self, progress: Progress) -> None:
        self.sweep_abandoned()  # under the build lock: see there
        tmp = self.root / f".tmp-{self.folder.name}-{os.getpid()}-{os.urandom(3).hex()}"
        tmp.mkdir()
        try:
            manifest = self._write(tmp, progress)
            self.publish(tmp, manifest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _write(self, tmp: Path, progress: Progress) -> dict:
        reading = Reading(self.source, progress, "building disk cache of")
        files: dict[str, BinaryIO] = {}
        crcs: dict[str, BlockCrc] = {}
        with contextlib.ExitStack() as opened:
            for _, chunk in reading:
                for name, values in chunk.items():
                    if name not in files:
                        files[name] = opened.enter_context(open(tmp / field_file(name), "wb"))
                        crcs[name] = BlockCrc()
                    data = np.ascontiguousarray(values).data.cast("B")
                    files[name].write(data)
                    crcs[name].update(data)
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
        self.seconds = reading.seconds
        crc_blocks = {spec.name: crcs[spec.name].finish() for spec in self.source.specs}
        manifest = build_manifest(self.source, reading.rows, crc_blocks, reading.seconds)
        with open(tmp / "manifest.json", "w") as text:
            json.dump(manifest, text, indent=1)
            text.flush()
            os.fsync(text.fileno())
        return manifest

    def publish(self, tmp: Path, manifest: dict) -> None:
        """Put the finished build folder ``tmp`` in place with one rename (under the build lock)."""
        fsync_dir(tmp)
        if self.folder.exists():
            # The old cache is known bad or stale; move it aside first so the rename is atomic,
            # then delete it once the new one is in place.
            stale = self.root / f".stale-{self.folder.name}-{os.getpid()}-{os.urandom(3).hex()}"
            os.rename(self.folder, stale)
        else:
            stale = None
        try:
            os.rename(tmp, self.folder)
        except OSError:
            # Another process (a second rank) published the same cache first; use theirs if it checks out.
            if self.problem() is not None:
                raise
        fsync_dir(self.root)
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)
        self.manifest = manifest

    def sweep_abandoned(self) -> None:
        """Remove build and stale folders of processes that died before cleaning up.

        This folder's own leftovers go whoever wrote them: the caller holds its build lock, so no
        live process builds it (one on another host of a shared file system included, whose pid
        cannot be checked here). Other folders' leftovers go when their pid is gone.
        """
        mine = (f".tmp-{self.folder.name}-", f".stale-{self.folder.name}-")
        for path in [*self.root.glob(".tmp-*"), *self.root.glob(".stale-*")]:
            try:
                owner, pid_text, _ = path.name.split("-", 1)[1].rsplit("-", 2)
                pid = int(pid_text)
            except ValueError:
                continue
            if path.name.startswith(mine):
                shutil.rmtree(path, ignore_errors=True)
            elif not pid_alive(pid) and not _building(self.root / owner):
                # A pid is only known on its own host: another host's live build (a shared file
                # system, a Ray worker) still holds its folder's lock.
                shutil.rmtree(path, ignore_errors=True)
        for lock in self.root.glob("*.lock"):  # of other folders' builds that were killed
            remove_if_stale(lock)


def _building(folder: Path) -> bool:
    """Whether some process, on any host, holds ``folder``'s build lock and is alive."""
    holder = read_holder(lock_path(folder))
    return holder is not None and why_stale(holder) is None


class BlockCrc:
    """CRC-32 of each BLOCK_BYTES block of a stream written in pieces of any size."""

    def __init__(self) -> None:
        self.blocks: list[int] = []
        self.crc = 0
        self.filled = 0

    def update(self, data: memoryview) -> None:
        while len(data):
            take = min(len(data), BLOCK_BYTES - self.filled)
            self.crc = zlib.crc32(data[:take], self.crc)
            self.filled += take
            data = data[take:]
            if self.filled == BLOCK_BYTES:
                self.blocks.append(self.crc)
                self.crc, self.filled = 0, 0

    def finish(self) -> list[int]:
        return self.blocks + ([self.crc] if self.filled else [])


def _manifest_id(folder: Path) -> tuple[int, int] | None:
    """Which manifest is published (inode, mtime): publishing renames a new folder into place."""
    try:
        st = (folder / "manifest.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _sample(n_blocks: int) -> list[int]:
    """The first and last block (where truncation and torn writes show) and a random sample."""
    if n_blocks <= SAMPLED_BLOCKS:
        return list(range(n_blocks))
    rng = np.random.default_rng()
    middle = rng.choice(np.arange(1, n_blocks - 1), SAMPLED_BLOCKS - 2, replace=False)
    return [0, *sorted(int(b) for b in middle), n_blocks - 1]


def _bad_block(path: Path, crcs: list[int], picked: range | list[int]) -> int | None:
    with open(path, "rb") as f:
        for block in picked:
            f.seek(block * BLOCK_BYTES)
            if zlib.crc32(f.read(BLOCK_BYTES)) != crcs[block]:
                return block
    return None


def field_file(field: str) -> str:
    """The file name of ``field`` in a cache folder (the serial build's and Ray's alike)."""
    # Field names may hold "/" (HDF5 groups); a short hash keeps "a/b" and "a_b" apart.
    tag = hashlib.blake2b(field.encode(), digest_size=3).hexdigest()
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', field)[:60]}-{tag}.bin"


# -- for caches whose field files were written elsewhere (data.build_cache's Ray tasks) -----------


def build_manifest(source: Source, rows: int, crc_blocks: dict[str, list[int]], seconds: float) -> dict:
    """The manifest of a cache of ``rows`` rows of ``source``: the serial build's and Ray's alike,
    so a cache either wrote is reused by the other's ``DiskCache.load``."""
    return {
        "format": FORMAT,
        "source": source.description,
        "fingerprint": source.fingerprint(),
        "length": rows,
        "fields": [
            {
                "name": s.name,
                "file": field_file(s.name),
                "dtype": np.dtype(s.dtype).str,
                "shape": list(s.shape),
                "bytes": rows * s.sample_bytes,
                "crc32_blocks": crc_blocks[s.name],
            }
            for s in source.specs
        ],
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_seconds": round(seconds, 3),
    }
