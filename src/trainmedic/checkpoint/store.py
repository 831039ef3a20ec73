"""The checkpoint directory on disk: atomic writes, verification, listing and retention.

A checkpoint is a directory ``<seq:06d>-step-<step>[-<phase>]`` holding one file per object and
a ``manifest.json`` that lists every file with its size and SHA-256. It is written under a
``.tmp-`` name, every file and the directory are fsynced, and only then is it renamed into place
(rename is atomic on POSIX file systems) and the parent directory fsynced. A directory without a
manifest, or whose files do not match it, is never taken for a checkpoint; older checkpoints are
deleted only after a newer one is in place and re-read. Sequence numbers order checkpoints by
when they were written, so two saves of the same step never collide.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic._os import TEMP_PREFIX as _TEMP_PREFIX
from trainmedic._os import abandoned, fsync_dir, remove_path, temp_sibling
from trainmedic.checkpoint.serialize import HashingWriter, dump, serializer
from trainmedic.errors import CheckpointError
from trainmedic.units import format_bytes

FORMAT = "trainmedic.checkpoint/1"
MANIFEST = "manifest.json"
_NAME = re.compile(r"^(?P<seq>\d{6,})-step-(?P<step>\d+)(?:-(?P<phase>.+))?$")
_SEQ = re.compile(r"(\d{6,})-step-")
_TRASH_PREFIX = ".trash-"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """A directory in the checkpoint folder that looks like a checkpoint (not yet verified)."""

    path: Path
    seq: int
    step: int
    phase: str | None


@dataclass
class Written:
    """What one write produced: where, how big, how long, and the manifest it carries."""

    path: Path
    bytes: int
    seconds: float
    manifest: dict[str, Any] = field(default_factory=dict)


def entry_name(seq: int, step: int, phase: str | None) -> str:
    suffix = f"-{re.sub(r'[^A-Za-z0-9_.-]+', '_', phase)}" if phase else ""
    return f"{seq:06d}-step-{step}{suffix}"


def write_checkpoint(
    directory: Path,
    seq: int,
    step: int,
    payloads: dict[str, Any],
    header: dict[str, Any],
    clock: Callable[[], float] = time.perf_counter,
) -> Written:
    """Write ``payloads`` ({file stem: object}) as checkpoint ``seq``; return where and how long.

    On any OSError the temporary directory is removed and CheckpointError says what failed, how
    much space there was, and that the previous checkpoints are untouched.
    """
    started = clock()
    final = directory / entry_name(seq, step, header.get("phase"))
    temp = temp_sibling(final)
    files: dict[str, dict[str, Any]] = {}
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainmedic-sha256")
    try:
        temp.mkdir()
        for stem, payload in payloads.items():
            name = f"{stem}.pt"
            kind = serializer(payload)
            with open(temp / name, "wb") as handle:
                writer = HashingWriter(handle, pool)
                try:
                    dump(payload, writer, kind)
                except Exception as exc:
                    if writer.error is not None:  # the disk, whatever the serializer made of it
                        raise writer.error from exc
                    if isinstance(exc, OSError):
                        raise
                    raise CheckpointError(
                        f"{stem!r} ({type(payload).__name__}) cannot be saved: {type(exc).__name__}: {exc}. Give it "
                        "state_dict()/load_state_dict() methods, or save the plain values it holds instead."
                    ) from exc
                handle.flush()
                os.fsync(handle.fileno())
            files[name] = {"bytes": writer.bytes, "sha256": writer.sha256, "serializer": kind}
        seconds = clock() - started
        manifest = {
            "format": FORMAT,
            **header,
            "step": step,
            "save_seconds": round(seconds, 6),
            "files": files,
        }
        final = _publish(temp, directory, seq, step, header.get("phase"), manifest)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise CheckpointError(
            _write_failure(directory, step, exc, sum(f["bytes"] for f in files.values()))
        ) from exc
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        pool.shutdown(wait=True)
    total = sum(f["bytes"] for f in files.values())
    # Re-read what landed before anything older may be deleted: the manifest parses and every
    # file has its size (the checksums were taken of the bytes handed to the OS, then fsynced).
    problem = verify(final, checksums=False)[1]
    if problem is not None:
        raise CheckpointError(f"checkpoint {final} did not read back after writing: {problem}")
    return Written(final, total, clock() - started, manifest)


def _publish(
    temp: Path, directory: Path, seq: int, step: int, phase: str | None, manifest: dict[str, Any]
) -> Path:
    """Write the manifest last and rename the finished directory into place under a free number.

    Another process writing to the same directory (a job requeued while the old one still runs,
    every rank of a DDP run saving) may have taken ``seq``: the rename then fails and the save
    takes the next free number instead of failing or overwriting.
    """
    for _ in range(1000):
        seq = max(seq, next_seq(directory, ignore=temp.name))
        manifest["seq"] = seq
        with open(temp / MANIFEST, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(temp)
        final = directory / entry_name(seq, step, phase)
        try:
            os.rename(temp, final)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                seq += 1
                continue
            raise
        fsync_dir(directory)
        return final
    raise OSError(errno.EEXIST, "no free checkpoint number after 1000 tries: is something else writing here?")


def _write_failure(directory: Path, step: int, exc: OSError, written: int) -> str:
    free = _free_bytes(directory)
    what = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EFBIG: "the file grew past the size limit",
    }.get(exc.errno or 0, "writing failed")
    room = (
        f" ({format_bytes(free)} free, {format_bytes(written)} written before the error)"
        if free is not None
        else ""
    )
    return (
        f"could not save step {step} to {directory}: {what}: {exc.strerror or exc}{room}. Nothing was left "
        "half-written and the previous checkpoints are intact; free space or give the Checkpointer a "
        "directory on a bigger disk."
    )


def _free_bytes(directory: Path) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def check_room(directory: Path, needed: int, what: str) -> None:
    """Raise CheckpointError before anything is written when ``needed`` bytes cannot fit."""
    free = _free_bytes(directory)
    if free is not None and needed > 0 and free < needed + _CHUNK:
        raise CheckpointError(
            f"{directory} has {format_bytes(free)} free but {what} needs about {format_bytes(needed)}: "
            "free space or give the Checkpointer a directory on a bigger disk before training starts."
        )


def prepare_directory(directory: Path) -> None:
    """Create ``directory`` and prove it takes a synced file, or raise CheckpointError saying why."""
    probe = temp_sibling(directory / "probe")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        try:
            with open(probe, "wb") as handle:
                handle.write(b"trainmedic")
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            probe.unlink(missing_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CheckpointError(
            f"cannot write checkpoints to {directory}: {reason} ({type(exc).__name__}). Give the "
            "Checkpointer a directory you can write to (it is created if missing) before training starts."
        ) from exc


def list_entries(directory: Path) -> list[Entry]:
    """Checkpoint-looking directories, newest write first."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        match = _NAME.match(name)
        if match and (directory / name).is_dir():
            found.append(Entry(directory / name, int(match["seq"]), int(match["step"]), match["phase"]))
    return sorted(found, key=lambda e: e.seq, reverse=True)


def leftovers(directory: Path) -> list[Path]:
    """Temporary directories of saves that never finished, and deletions that never finished."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(directory / n for n in names if n.startswith((_TEMP_PREFIX, _TRASH_PREFIX)))


def next_seq(directory: Path, ignore: str = "") -> int:
    """One past every sequence number in use, interrupted saves included (but not ``ignore``)."""
    highest = 0
    for name in os.listdir(directory):
        if name == ignore:
            continue
        match = _SEQ.match(name.removeprefix(_TEMP_PREFIX).removeprefix(_TRASH_PREFIX))
        if match:
            highest = max(highest, int(match[1]))
    return highest + 1


def read_manifest(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        with open(path / MANIFEST, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        return None, "no manifest.json: the save was interrupted before it finished"
    except (OSError, ValueError) as exc:
        return None, f"manifest.json cannot be read ({exc})"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        return None, f"manifest.json is not a {FORMAT} manifest (format {got!r})"
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("step"), int):
        return None, "manifest.json lacks its files or step"
    return manifest, None


def verify(path: Path, checksums: bool = True) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, None) when every listed file is there with its size (and SHA-256), else (None, why)."""
    manifest, problem = read_manifest(path)
    if manifest is None:
        return None, problem
    for name, facts in manifest["files"].items():
        try:
            size = (path / name).stat().st_size
        except OSError:
            return None, f"{name} is missing"
        if size != facts.get("bytes"):
            return (
                None,
                f"{name} has {size} bytes, the manifest says {facts.get('bytes')} (truncated or replaced)",
            )
    if checksums:
        names = sorted(manifest["files"], key=lambda n: -manifest["files"][n]["bytes"])
        # hashlib releases the GIL: the model's and the optimizer's files hash side by side.
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1, len(names)))) as pool:
                digests = dict(zip(names, pool.map(lambda n: _sha256(path / n), names)))
        except OSError as exc:
            return None, f"cannot be read: {exc.strerror or exc}"
        for name in names:
            if digests[name] != manifest["files"][name].get("sha256"):
                return (
                    None,
                    f"{name} does not match its SHA-256 checksum (the file changed after it was written)",
                )
    return manifest, None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def remove(paths: Iterable[Path]) -> None:
    """Delete checkpoint directories: renamed to a hidden name first, so a half-deleted one is never listed."""
    for path in paths:
        trash = path.with_name(f"{_TRASH_PREFIX}{path.name}")
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            continue
        shutil.rmtree(trash, ignore_errors=True)


def clean_leftovers(directory: Path) -> list[Path]:
    """Remove what interrupted saves and deletions of *dead* processes left; return what was removed."""
    removed = []
    for path in leftovers(directory):
        if path.name.startswith(_TEMP_PREFIX) and not abandoned(path):
            continue  # a live process (here, or on another host of a shared file system) is writing it
        remove_path(path)  # also the write probe of a start-up that was killed
        removed.append(path)
    return removed


def is_interrupted_save(path: Path) -> bool:
    """A leftover that held a checkpoint being written (not a write probe, not a deletion)."""
    return path.name.startswith(_TEMP_PREFIX) and not path.name.startswith(f"{_TEMP_PREFIX}probe.")


def to_keep(entries: list[Entry], keep_last: int) -> set[Path]:
    """The newest ``keep_last`` checkpoints, and the newest one that closed each phase."""
    newest_first = sorted(entries, key=lambda e: e.seq, reverse=True)
    keep = {e.path for e in newest_first[:keep_last]}
    seen: set[str] = set()
    for entry in newest_first:
        if entry.phase is not None and entry.phase not in seen:
            seen.add(entry.phase)
            keep.add(entry.path)
    return keep
