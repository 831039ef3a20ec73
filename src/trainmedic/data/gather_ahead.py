"""The gather half of the ram tier's path to the GPU: threads that fill a ring of pinned slots ahead of the copies.

``transfer.HostToDevice`` copies each batch from its slot on a side stream; the threads here
gather batches k+1..k+N-1 into the other slots meanwhile. Why threads, chunks claimed in order
and this sizing: ``transfer.py``'s docstring.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainmedic.data.sources.base import FieldSpec
from trainmedic.errors import DataError

#: Smaller batches are gathered inline: a thread hand-off costs more than gathering them.
INLINE_BYTES = 256 * 1024
#: The least a gather thread claims at once. Every claim runs some Python under the GIL (lock,
#: hand-over, wake-up: 30-100 µs a batch through one thread on a loaded 2-vCPU VM, measured
#: with 16-byte batches), and so does the consumer's copy; 4 MiB keeps that a small share of a
#: chunk's ~0.5 ms gather, so eight threads are not serialised on the GIL. Smaller batches are
#: gathered whole, several at once, one per thread.
CHUNK_BYTES = 4 * 1024 * 1024
#: A cap: eight ``np.take`` at ~8 GB/s each already outrun a PCIe gen5 x16 link (53 GB/s); more
#: would only contend for memory bandwidth and the GIL.
MAX_THREADS = 8
#: Name prefix of the gather threads (tests and debuggers look for it).
THREAD_NAME = "trainmedic-gather"


def usable_cores() -> int:
    """Cores this process may run on, shared among the ranks torchrun started on this host."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    return max(1, cores // ranks)


def gather_threads(batch_bytes: int, cores: int) -> int:
    """Background gather threads for batches of ``batch_bytes``; 0 gathers inline."""
    if batch_bytes < INLINE_BYTES:
        return 0
    return max(1, min(MAX_THREADS, cores // 2))


def chunk_rows(batch_rows: int, sample_bytes: int, threads: int) -> int:
    """Rows a thread claims at once: the batch split across ``threads``, but never under ``CHUNK_BYTES``."""
    least = math.ceil(CHUNK_BYTES / max(1, sample_bytes))
    return max(1, math.ceil(batch_rows / max(1, threads)), min(least, batch_rows))


def ring_slots(batch_rows: int, rows_per_chunk: int, threads: int) -> int:
    """Pinned slots: the batches ``threads`` gather at once, plus one ready and one being copied."""
    chunks = math.ceil(max(1, batch_rows) / rows_per_chunk)
    return max(3, math.ceil(threads / chunks) + 2)


class Ring:
    """N pinned slots of ``max_batch`` rows per field, and the event of the copy that last read each."""

    def __init__(self, copier: Any, specs: tuple[FieldSpec, ...], max_batch: int, slots: int) -> None:
        self.tensors = [[copier.staging((max_batch, *s.shape), s.dtype) for s in specs] for _ in range(slots)]
        self.views = [[t.numpy() for t in slot] for slot in self.tensors]  # made once: .numpy() costs µs
        self.events: list[Any] = [None] * slots
        self.crew: GatherCrew | None = None  # its gather threads, started on first use, kept between passes

    def gather(self, slot: int, arrays: Sequence[np.ndarray], indices: np.ndarray, lo: int, hi: int) -> None:
        for array, view in zip(arrays, self.views[slot]):
            np.take(array, indices[lo:hi], axis=0, out=view[lo:hi], mode="clip")

    def staged(self, slot: int, rows: int) -> list[Any]:
        return [t[:rows] for t in self.tensors[slot]]


@dataclass(eq=False)
class _Batch:
    number: int
    slot: int
    indices: np.ndarray | None
    chunks: list[tuple[int, int]]
    claimed: int = 0  # chunks handed to threads
    left: int = 0  # chunks not gathered yet
    writable: bool = False  # the copy that last read the slot is done
    errors: list[BaseException] = field(default_factory=list)


class GatherCrew:
    """A ring's gather threads: they claim chunks in order, ahead of the consumer, which copies in order.

    The threads live as long as the ring, across passes: starting and joining eight threads costs
    about 0.65 ms on a 2-vCPU VM, a quarter of a 32-batch epoch's copies at 53 GB/s. Batch k goes
    to slot k % N and may be started once the consumer has issued the copy of batch k - N
    (``handed``), so at most N batches are pulled from ``jobs`` ahead of the copies. The shared
    state sits under one lock with four conditions, so a change wakes only the threads it
    concerns (eight threads woken per batch would spend the GIL the consumer needs); the gathers
    and event waits run outside the lock."""

    def __init__(self, ring: Ring, copier: Any, chunk_rows: int, threads: int) -> None:
        self.ring, self.copier, self.chunk_rows = ring, copier, chunk_rows
        lock = threading.Lock()
        self.lock = lock
        self.claimable = threading.Condition(lock)  # threads waiting for a chunk to claim
        self.writable = threading.Condition(lock)  # threads waiting for their batch's slot
        self.done = threading.Condition(lock)  # the consumer, waiting for its next batch
        self.idle = threading.Condition(lock)  # the consumer, waiting for the threads to finish a pass
        self.generation = 0  # passes started
        self.active = False
        self.closed = False
        self.busy = 0  # threads holding a claim
        self._begin_pass(None, iter(()))
        self.workers = [
            threading.Thread(target=self._work, name=f"{THREAD_NAME}-{i}", daemon=True)
            for i in range(threads)
        ]
        for worker in self.workers:
            worker.start()

    def _begin_pass(self, fields: list[np.ndarray] | None, jobs: Iterator[np.ndarray]) -> None:
        self.fields, self.jobs = fields, jobs
        self.open: dict[int, _Batch] = {}  # pulled from jobs, not yet handed to the consumer
        self.current: _Batch | None = None  # the batch whose chunks are being claimed
        self.pulled = 0
        self.handed = 0  # batches whose copies the consumer has issued
        self.end: int | None = None  # the number of batches, once jobs ran out
        self.stopping = False

    def serve(
        self,
        send: Callable[[Ring, int, int], tuple[Any, ...]],
        fields: list[np.ndarray],
        jobs: Iterator[np.ndarray],
    ) -> Iterator[tuple[Any, ...]]:
        """One pass: the batches of ``jobs`` in order, copied to the device."""
        with self.lock:
            self._begin_pass(fields, jobs)
            self.generation += 1
            self.active = True
            self.claimable.notify_all()
        try:
            k = 0
            while True:
                with self.lock:
                    while not (self._ready(k) or self.closed):
                        self.done.wait()
                    if self.closed:
                        raise DataError("trainmedic.data: the loader was closed while this pass was served")
                    batch = self.open.pop(k, None)
                if batch is None:
                    return
                if batch.errors:
                    error = batch.errors[0]
                    raise DataError(
                        f"trainmedic.data could not gather batch {k} of this pass into pinned memory "
                        f"(in a background thread): {type(error).__name__}: {error}"
                    ) from error
                assert batch.indices is not None  # a batch without indices holds its order's error
                out = send(self.ring, batch.slot, len(batch.indices))
                with self.lock:
                    self.handed = k + 1
                    self.claimable.notify()  # batch k + N may start: one thread opens it
                k += 1
                yield out
        finally:
            with self.lock:  # the pass is over: wait until no thread still writes into the ring
                self.stopping = True
                for cond in (self.claimable, self.writable):
                    cond.notify_all()
                while self.busy:
                    self.idle.wait()
                self.active = False
                self._begin_pass(None, iter(()))  # drop the pass's arrays and order

    def stop(self) -> None:
        with self.lock:
            self.closed = self.stopping = True
            for cond in (self.claimable, self.writable, self.done):
                cond.notify_all()
        for worker in self.workers:
            if worker is not threading.current_thread():
                worker.join()

    def _ready(self, k: int) -> bool:
        batch = self.open.get(k)
        if batch is not None:
            return batch.left == 0 or bool(batch.errors)
        return self.end is not None and k >= self.end

    def _work(self) -> None:
        finished = 0  # the last pass this thread found nothing more to claim in
        while True:
            with self.lock:
                while not self.closed and (not self.active or self.generation == finished):
                    self.claimable.wait()
                if self.closed:
                    return
                generation = self.generation
                claim = self._claim()
                if claim is None:
                    finished = generation
                    continue
                self.busy += 1
                fields = self.fields
            batch, lo, hi = claim
            error = None
            try:
                if lo == 0:  # the first chunk's thread waits for the slot; the others wait for it
                    try:
                        event = self.ring.events[batch.slot]
                        if event is not None:
                            self.copier.wait(event)
                    finally:
                        with self.lock:
                            batch.writable = True
                            if len(batch.chunks) > 1:
                                self.writable.notify_all()
                else:
                    with self.lock:
                        while not (batch.writable or self.stopping):
                            self.writable.wait()
                # (indices and fields are there for every batch a thread can claim)
                if (
                    not batch.errors
                    and not self.stopping
                    and fields is not None
                    and batch.indices is not None
                ):
                    self.ring.gather(batch.slot, fields, batch.indices, lo, hi)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised where it iterates
                error = exc
            with self.lock:
                if error is not None:
                    batch.errors.append(error)
                batch.left -= 1
                if batch.left == 0 or error is not None:
                    self.done.notify()
                self.busy -= 1
                if not self.busy:
                    self.idle.notify_all()

    def _claim(self) -> tuple[_Batch, int, int] | None:
        """The next chunk in order (under the lock), waiting for a free slot; None: the pass has no more."""
        n = len(self.ring.views)
        while self.active and not self.stopping:
            batch = self.current
            if batch is not None and batch.claimed < len(batch.chunks):
                lo, hi = batch.chunks[batch.claimed]
                batch.claimed += 1
                return batch, lo, hi
            if self.end is not None:
                return None
            k = self.pulled
            if k >= self.handed + n:  # slot k % n still holds batch k - n, not yet copied
                self.claimable.wait()
                continue
            try:
                indices = next(self.jobs)
            except StopIteration:
                self.end = k
                self.done.notify_all()
                return None
            except BaseException as exc:  # noqa: BLE001 - the order's own error, raised at batch k
                self.open[k] = _Batch(k, k % n, None, [], errors=[exc])
                self.end = self.pulled = k + 1
                self.done.notify_all()
                return None
            rows, step = len(indices), self.chunk_rows
            chunks = [(lo, min(lo + step, rows)) for lo in range(0, max(rows, 1), step)]
            self.current = self.open[k] = _Batch(k, k % n, indices, chunks, left=len(chunks))
            self.pulled = k + 1
            if len(chunks) > 1:
                self.claimable.notify(len(chunks) - 1)  # idle threads take the other chunks
        return None


def stop_crews(crews: list[GatherCrew]) -> None:
    for crew in crews:
        crew.stop()
