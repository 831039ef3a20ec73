"""What a restore reads back: the newest checkpoint that verifies, where each object comes from
(that checkpoint, or an older phase checkpoint that saved it), and each object's file loaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.checkpoint import serialize, state, store
from trainmedic.errors import CheckpointMismatchError


@dataclass
class Found:
    """The checkpoint folder as a restore sees it, newest first."""

    #: The newest checkpoint that verifies and its manifest; None when none does.
    chosen: tuple[store.Entry, dict[str, Any]] | None = None
    #: The checkpoints older than ``chosen`` (not verified yet: only a phase's may be needed).
    older: list[store.Entry] = field(default_factory=list)
    #: What was passed over, and why: interrupted saves (removed) and corrupt checkpoints.
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    #: The corrupt ones: dropped once a newer checkpoint is written.
    corrupt: list[Path] = field(default_factory=list)


def newest_verified(directory: Path) -> Found:
    """Clear leftovers of interrupted saves, then find the newest checkpoint that verifies."""
    found = Found()
    for path in store.clean_leftovers(directory):
        if store.is_interrupted_save(path):
            found.skipped.append(
                (path, "an interrupted save (the process stopped while writing it); removed")
            )
    for entry in store.list_entries(directory):
        if found.chosen is not None:
            found.older.append(entry)
            continue
        manifest, problem = store.verify(entry.path)
        if manifest is None:
            found.skipped.append((entry.path, problem or "unreadable"))
            found.corrupt.append(entry.path)
        else:
            found.chosen = (entry, manifest)
    return found


def sources(
    objects: dict[str, Any], chosen: tuple[store.Entry, dict[str, Any]], older: list[store.Entry]
) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Where each object comes from: the newest checkpoint, or else the phase checkpoint that saved it.

    A phase's output (a sample pool, a pretrained encoder) is saved once at the phase boundary;
    later step checkpoints need not repeat it. Older checkpoints are verified only when needed.
    """
    entry, manifest = chosen
    found = {name: (entry.path, manifest) for name in objects if f"{name}.pt" in manifest["files"]}
    wanted = [name for name in objects if name not in found]
    for candidate in older:
        if not wanted:
            break
        if candidate.phase is None:
            continue
        listed, _ = store.read_manifest(candidate.path)
        if listed is None or not any(f"{name}.pt" in listed["files"] for name in wanted):
            continue
        verified, _ = store.verify(candidate.path)
        if verified is None:
            continue
        for name in [n for n in wanted if f"{n}.pt" in verified["files"]]:
            found[name] = (candidate.path, verified)
            wanted.remove(name)
    return found


def load(path: Path, manifest: dict[str, Any], name: str) -> state.Captured:
    """Object ``name``'s file in checkpoint ``path``, or CheckpointMismatchError saying why it cannot be read."""
    kind = manifest.get("objects", {}).get(name, state.VALUE)
    serializer = manifest["files"][f"{name}.pt"].get("serializer", "pickle")
    try:
        return state.Captured(
            kind, serialize.load_file(path / f"{name}.pt", serializer, mmap=kind == state.MODULE)
        )
    except Exception as exc:
        saved_type = manifest.get("types", {}).get(name, "an object")
        raise CheckpointMismatchError(
            f"{name!r} in {path} cannot be read back: {type(exc).__name__}: {exc}. It was saved as {saved_type}; a "
            "class that was renamed, moved or changed since cannot be unpickled. Keep that class importable under "
            "its old name, give it state_dict()/load_state_dict(), or save plain values instead."
        ) from exc
