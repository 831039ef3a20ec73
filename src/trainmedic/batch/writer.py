"""Shards written by one background thread, so generating the next shard overlaps writing this one.

One thread, in shard order: the manifest lists shards as they are written, and a resumed job
must find every shard before the last listed one whole. The queue holds ``depth`` shards (1 by
default): generation runs at most that far ahead, which bounds the host memory in flight to
``depth + 2`` shards (one being made, ``depth`` waiting, one being written), 64 MiB each.

A failed write (a full disk) stops the writing: later shards are dropped, not written out of
order, and the error is raised in the caller's thread at its next hand-off or at ``close()``.
A stop signal is the caller's business: it hands over the shard in progress, then ``close()``
waits for every shard handed over to be on disk (a clean stop).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from trainmedic.batch.host import HostShard
from trainmedic.batch.stages import Stages
from trainmedic.errors import BatchError

__all__ = ["ShardWriter"]

_END = object()


class ShardWriter:
    """``put(shard)`` hands a shard to the writer thread; ``close()`` waits for all of them.

    ``write(index, arrays)`` is called in the writer thread, one shard at a time, in the order
    shards were put. ``written`` counts the shards it finished.
    """

    def __init__(
        self, write: Callable[[int, dict[str, np.ndarray]], None], stages: Stages, depth: int = 1
    ) -> None:
        self._write = write
        self._stages = stages
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: tuple[int, BaseException] | None = None
        self._dropping = False
        self._closed = False
        self.written = 0
        # A daemon: a write stuck on a dead disk must not keep the interpreter alive after the
        # caller has gone (an interrupted shard's temporary file is cleared by the next run).
        self._thread = threading.Thread(target=self._run, name="trainmedic-batch-writer", daemon=True)
        self._thread.start()

    def put(self, shard: HostShard) -> None:
        """Queue ``shard``; blocks while ``depth`` shards wait. Raises an earlier write's error."""
        self.raise_if_failed()
        started = time.perf_counter()
        self._queue.put(shard)
        self._stages.add("waited", time.perf_counter() - started)
        self.raise_if_failed()

    def close(self) -> None:
        """Wait until every shard put is written; raise the first write's error, if any."""
        started = time.perf_counter()
        self.shut()
        self._stages.add("waited", time.perf_counter() - started)
        self.raise_if_failed()

    def shut(self, drop_waiting: bool = False) -> BaseException | None:
        """End the thread and return its error rather than raise it: for a caller that is raising
        its own. The shards put are written (they are good: a resume keeps them), or, with
        ``drop_waiting`` (a second Ctrl+C: now), only the one being written is finished."""
        self._dropping = self._dropping or drop_waiting
        if not self._closed:
            self._closed = True
            self._queue.put(_END)
            self._thread.join()
        return self._error[1] if self._error else None

    def raise_if_failed(self) -> None:
        if self._error is None:
            return
        index, exc = self._error
        if isinstance(exc, BatchError):
            raise exc  # the store's message names the shard, the folder and what to do
        raise BatchError(
            f"writing shard {index} failed in the background writer ({type(exc).__name__}: {exc}); the shards "
            f"before it are intact. Run the same call again to resume."
        ) from exc

    def _run(self) -> None:
        while True:
            shard = self._queue.get()
            if shard is _END:
                return
            try:
                if self._error is None and not self._dropping:
                    shard.wait()
                    for stage, seconds in shard.device_seconds().items():
                        self._stages.add(stage, seconds)
                    started = time.perf_counter()
                    self._write(shard.index, shard.arrays)
                    self._stages.add("write", time.perf_counter() - started)
                    self.written += 1
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
                self._error = (shard.index, exc)
            finally:
                shard.release()
