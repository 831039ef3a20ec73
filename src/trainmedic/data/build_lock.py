"""One builder per cache folder: a lock file beside it, so N ranks build a cache once, not N times.

    with build_lock(folder, ready=published) as lock:
        if lock.held:
            ...build folder...            # nobody else builds it meanwhile
        # else: ready() turned true while waiting: another process published it; map theirs

The lock is ``<folder>.lock``, created with ``O_CREAT | O_EXCL`` (atomic on local file systems
and NFSv3+), holding the holder's host, pid, start time and a random token. While it holds the
lock, a thread refreshes the file's mtime every ``HEARTBEAT_S``: the heartbeat. A waiter polls
(``ready()``, then the lock) and takes a lock over when it is stale:

- same host and the pid is gone (a build killed with SIGKILL, an OOM kill), or
- the heartbeat is older than ``STALE_S`` (a stopped or hung process; and the only test for a
  holder on another host, since a shared file system may hold a cache another node builds and
  only that node can see its pid).

Taking over renames the stale file aside and checks that what was renamed is the stale lock
(same token) before deleting it, so two waiters that both judged it stale cannot remove the
fresh lock the faster one just made. A wait longer than ``timeout`` raises a DataError naming
the lock, its holder and how to clear it. Nothing here prints: the first wait is announced
through ``on_wait`` and the ``trainmedic.data`` logger.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainmedic._os import HOST, pid_alive
from trainmedic.errors import DataError
from trainmedic.units import format_duration, format_seconds

logger = logging.getLogger("trainmedic.data")

#: The holder touches its lock this often.
HEARTBEAT_S = 2.0
#: A lock untouched this long belongs to no live builder. Generous: NFS mtimes come from the
#: server's clock, and a node's clock may be off by seconds.
STALE_S = 60.0
#: How long a waiter waits for a live builder before giving up with an error: a build of a few
#: TB from network storage takes hours, and a live heartbeat means it is still going.
WAIT_LIMIT_S = 6 * 3600.0
#: How often a waiter looks again (a polling interval, not a synchronisation).
POLL_S = 0.05


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its file says; ``heartbeat_age`` from its mtime."""

    host: str
    pid: int | None
    started: str
    token: str | None
    heartbeat_age: float

    def describe(self) -> str:
        who = (
            f"pid {self.pid} on host {self.host}"
            if self.pid is not None
            else "a process that has not written its name yet"
        )
        return f"{who} (since {self.started or '?'}, last heartbeat {format_seconds(max(0.0, self.heartbeat_age))} ago)"


def lock_path(folder: Path) -> Path:
    """The lock file of ``folder``: beside it, so it never ends up inside what it guards."""
    folder = Path(folder)
    return folder.with_name(f"{folder.name}.lock")


class BuildLock:
    """The state of one :func:`build_lock` call: whether it is held, how long it waited, for whom."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.held = False
        #: Seconds spent waiting for another holder (0 when the lock was free).
        self.waited = 0.0
        #: The holder waited for, if any.
        self.holder: Holder | None = None
        #: Why a stale lock was taken over (None when none was).
        self.took_over: str | None = None
        self._token = os.urandom(8).hex()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- taking it ----------------------------------------------------------------------------

    def acquire(
        self,
        ready: Callable[[], bool] | None = None,
        timeout: float = WAIT_LIMIT_S,
        on_wait: Callable[[Holder], None] | None = None,
        stale_after: float = STALE_S,
    ) -> None:
        """Hold the lock, or return without it once ``ready()`` is true; DataError after ``timeout``."""
        started = time.monotonic()
        announced = False
        while True:
            if self._create():
                return
            holder = read_holder(self.path)
            if holder is None:
                continue  # released between our create and our read: try again at once
            stale = why_stale(holder, stale_after)
            if stale is not None:
                if self._take_over(holder):
                    self.took_over = (
                        f"took over the stale build lock {self.path} of {holder.describe()}: {stale}"
                    )
                    logger.warning("trainmedic: %s", self.took_over)
                continue
            if ready is not None and ready():
                return
            self.holder = holder
            self.waited = time.monotonic() - started
            if not announced:
                announced = True
                logger.info("trainmedic: waiting for %s, which holds %s", holder.describe(), self.path)
                if on_wait is not None:
                    on_wait(holder)
            if self.waited > timeout:
                raise DataError(
                    f"waited {format_duration(self.waited)} for the build lock {self.path}, held by {holder.describe()}; "
                    f"it is still alive, so it is still building. If that process is stuck or gone, delete {self.path} "
                    f"(and the .tmp- folders beside it) and run again, or pass cache_dir= another folder."
                )
            time.sleep(POLL_S)

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        content = {
            "host": HOST,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "token": self._token,
        }
        try:
            os.write(fd, json.dumps(content).encode())
        finally:
            os.close(fd)
        self.held = True
        self._beat = threading.Thread(target=self._heartbeat, name="trainmedic-build-lock", daemon=True)
        self._beat.start()
        return True

    def _take_over(self, holder: Holder) -> bool:
        aside = self.path.with_name(f".{self.path.name}.takeover-{HOST}-{os.getpid()}-{os.urandom(3).hex()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # another waiter took it over first
        renamed = read_holder(aside)
        if renamed is not None and renamed.token == holder.token:
            aside.unlink(missing_ok=True)
            return True
        # Between our read and our rename the stale lock was replaced by a live one: put it back.
        with contextlib.suppress(FileExistsError, FileNotFoundError):
            os.link(aside, self.path)
        aside.unlink(missing_ok=True)
        return False

    # -- holding it ---------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        if not self.held:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        holder = read_holder(self.path)
        if holder is not None and holder.token == self._token:  # never remove a lock someone took over
            self.path.unlink(missing_ok=True)
        self.held = False


@contextlib.contextmanager
def build_lock(
    folder: Path,
    *,
    ready: Callable[[], bool] | None = None,
    timeout: float = WAIT_LIMIT_S,
    on_wait: Callable[[Holder], None] | None = None,
    stale_after: float = STALE_S,
) -> Iterator[BuildLock]:
    """Hold the build lock of ``folder`` for the ``with`` block (``lock.held``), or enter without it
    when ``ready()`` becomes true while another process holds it. See the module docstring."""
    lock = BuildLock(lock_path(folder))
    lock.acquire(ready, timeout, on_wait, stale_after)
    try:
        yield lock
    finally:
        lock.release()


def remove_if_stale(path: Path, stale_after: float = STALE_S) -> str | None:
    """Remove the lock file ``path`` when its holder is gone; return why it was, else None."""
    holder = read_holder(path)
    stale = why_stale(holder, stale_after) if holder is not None else None
    if holder is None or stale is None:
        return None
    return stale if BuildLock(path)._take_over(holder) else None


def read_holder(path: Path) -> Holder | None:
    """The holder of the lock at ``path``; None when there is no lock. A lock whose content is not
    written yet (or is damaged) has an unknown holder and is judged by its mtime alone."""
    try:
        age = time.time() - path.stat().st_mtime
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError:
        text, age = "", 0.0
    try:
        content = json.loads(text)
        pid = content.get("pid")
        return Holder(
            str(content.get("host", "?")),
            pid if isinstance(pid, int) else None,
            str(content.get("started", "")),
            content.get("token"),
            age,
        )
    except (ValueError, AttributeError):
        return Holder("?", None, "", None, age)


def why_stale(holder: Holder, stale_after: float = STALE_S) -> str | None:
    """Why ``holder`` no longer builds, or None while it may still be building."""
    if holder.host == HOST and holder.pid is not None and not pid_alive(holder.pid):
        return f"pid {holder.pid} is no longer running on this host"
    if holder.heartbeat_age > stale_after:
        return f"no heartbeat for {format_duration(holder.heartbeat_age)} (more than {format_duration(stale_after)})"
    return None
