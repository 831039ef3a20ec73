"""Small operating-system helpers shared by the data cache, the checkpoint store, the shards of
``trainmedic.batch``, the reports, and the child processes of preflight and ``tune --script``."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

#: What is being written carries this prefix until it is renamed into place.
TEMP_PREFIX = ".tmp-"
# Temporary names carry the host and pid of their writer: on a shared file system only the
# writer's own host can tell whether that process is gone.
HOST = re.sub(r"[^A-Za-z0-9]+", "_", socket.gethostname()) or "host"
#: Another host's temporary file is taken as abandoned only after this long untouched.
STALE_S = 24 * 3600.0


def current_frames() -> dict[int, FrameType]:
    """``sys._current_frames()``, safe on Python 3.11: that call holds the runtime's thread-list
    lock while it builds its dict, and a garbage collection started by one of its allocations can
    free a thread state, which takes the same lock: the process deadlocks (CPython gh-106883,
    fixed in 3.12; a test worker hung so, its sampler thread in ``gc_collect_main``). Collections
    are held off for the call, and left off where the program had turned them off."""
    if sys.version_info >= (3, 12) or not gc.isenabled():
        return sys._current_frames()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        gc.enable()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs here (also when it belongs to another user); False once it is gone,
    including an exited process its parent has not reaped yet (a zombie still answers kill 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS): kill 0 is all there is
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable: the directory entry itself is synced."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_sibling(path: Path, name: str | None = None) -> Path:
    """``.tmp-<name>.<host>.<pid>`` beside ``path``: where this process writes ``path`` (or
    ``name``) before renaming it into place."""
    return path.with_name(f"{TEMP_PREFIX}{name or path.name}.{HOST}.{os.getpid()}")


def abandoned(path: Path) -> bool:
    """Whether a :func:`temp_sibling` leftover belongs to no live writer: its process is gone (or
    is this one: a write that raised), or, from another host, it has been untouched for STALE_S."""
    parts = path.name.rsplit(".", 2)
    host, pid = (parts[1], parts[2]) if len(parts) == 3 else ("", "")
    if host == HOST and pid.isdigit():
        return int(pid) == os.getpid() or not pid_alive(int(pid))
    try:
        return time.time() - path.stat().st_mtime >= STALE_S
    except OSError:
        return True


def remove_path(path: Path) -> None:
    """Remove a file or a whole folder; what is already gone is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str, durable: bool = False) -> Path:
    """Write to a temporary sibling, then rename: a reader never sees half a report. ``durable``
    also syncs the file before the rename and the folder after it, so a crash keeps one version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        fsync_dir(path.parent)
    return path


def kill_group(pgid: int) -> None:
    """SIGKILL a child's whole process group (its DataLoader workers too); one already gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_tail(path: Path, size: int) -> str:
    """The last ``size`` bytes of a log as text; "" when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def read_json(path: Path) -> dict | None:
    """A JSON object written by a child; None when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
