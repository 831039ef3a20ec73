"""Gather a batch from host arrays and move it to the device: one fancy-index op per field.

**On the CPU** every batch is a fresh ``np.take`` array, gathered where the user iterates:
reusing a buffer would silently change batches a user kept (a list of batches, a validation
cache). Nothing below applies to it.

**On CUDA** a batch crosses four stages, each overlapping the others::

    threads ─np.take─> pinned slot k%N ─side-stream copy─> device tensor ─event─> loop's stream

* **A ring of N pinned slots.** A copy can only run at the link's speed from pinned memory
  (53 against 13 GB/s pageable on an H200, PCIe gen5 x16), and a slot is reused only once the
  copy that last read it is done. N is the number of batches the gather threads need in
  progress at once plus two (one ready, one being copied); never under three, so a gather, a
  ready batch and a copy always overlap. The host blocks on that slot's event, never on a
  stream or the device.
* **Gather ahead, in background threads.** One thread gathering and copying in turn was the
  whole problem: the ram tier moved 6.4 GB/s on that H200 (12 % of the link, half a pageable
  ``.to()``), the speed of one ``np.take`` alone, while 16 cores gathered 120 GB/s into pinned
  memory. Threads now gather batches k+1..k+N-1 while batch k is copied and the training step
  runs; ``np.take`` releases the GIL for numeric dtypes (checked: a Python thread keeps
  running during a long take), so the threads really run in parallel.
* **Chunks claimed in order, not a pool barrier.** A batch is cut into chunks of at least
  ``CHUNK_BYTES`` (4 MiB) and the threads claim chunks one after another, across batch
  boundaries. Smaller batches are gathered whole, several at once (one per thread); a larger
  one is split across threads. A descheduled thread delays only its own chunk while the others
  move on to the next batches: ``torch.index_select`` (OpenMP-style, every thread at a barrier
  per call) collapsed to 0.3 GB/s on a 2-core machine with a busy neighbour, where one
  ``np.take`` kept 7.7 GB/s (benchmarks/data_tiers.py, gather_busy).
* **Sized to the cores this process may use**: half of ``os.sched_getaffinity`` (divided by
  ``LOCAL_WORLD_SIZE`` under torchrun), at most ``MAX_THREADS``; the rest is the training
  loop's, the CUDA driver's and other ranks'. Two usable cores get one thread (overlap, no
  split). Batches under ``INLINE_BYTES`` are gathered inline by the consumer: handing a batch to
  a thread and back costs about as much as gathering 256 KiB (30-100 µs on a 2-vCPU VM).
* **Copies on a side stream, ordered by events.** Each batch's copy is one ``non_blocking``
  ``.to()`` per field on a side stream, then an event; the consumer's stream waits on that
  event only (no default-stream synchronisation), and ``record_stream`` keeps the caching
  allocator from reusing a batch the consumer has not finished with. The copy is issued by the
  consumer thread, because the stream it must wait on is that thread's current stream.

``mode="clip"`` into the pinned buffer: the default ``mode="raise"`` with ``out=`` buffers the
whole output first (4-5 GB/s); the indices come from the epoch order, always in range.

The threads, the ring and their sizing live in ``gather_ahead.py``. The three CUDA calls sit behind :class:`CudaCopier` (pinned staging, copy + event, wait on an
event), which tests replace with a host implementation to check the ring without a GPU. Two
iterators alive at once (``iter(loader)`` twice) get separate rings. A ring's threads outlive a
pass (an epoch) and stop at ``close()`` or when the mover is garbage-collected. On a CUDA run
``trainmedic run`` charges time the loop spends in this module to ``transfer``; on a CPU run it
only gathers, which is ``data``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from trainmedic.data.gather_ahead import (
    GatherCrew,
    Ring,
    chunk_rows,
    gather_threads,
    ring_slots,
    stop_crews,
    usable_cores,
)
from trainmedic.data.sources.base import FieldSpec


class CudaCopier:
    """The ring's three CUDA calls: a pinned staging buffer, a copy with its event, a wait on one."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def staging(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.torch.empty(shape, dtype=torch_dtype(dtype), pin_memory=True)

    def copy(self, staged: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
        """Copy ``staged`` (pinned) to the device on the side stream; the caller's stream waits on it."""
        torch = self.torch
        # The copy reads only the pinned slot (filled on the host) and writes fresh memory, so it
        # waits on nothing and may run under the previous step's kernels.
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            out = tuple(t.to(self.device, non_blocking=True) for t in staged)
            done = torch.cuda.Event()
            done.record(self.stream)
        consumer.wait_event(done)
        for t in out:
            t.record_stream(consumer)
        return out, done

    def wait(self, event: Any) -> None:
        """Block the calling thread until the copy that recorded ``event`` has read its slot."""
        # Called from a gather thread, whose current device is cuda:0 until set.
        with self.torch.cuda.device(self.device):
            event.synchronize()


class HostToDevice:
    """Turns (host arrays, batch indices) into tuples of tensors on ``device``.

    ``copier`` replaces :class:`CudaCopier` (tests); ``threads`` overrides :func:`gather_threads`
    (benchmarks)."""

    def __init__(
        self,
        specs: Sequence[FieldSpec],
        device: Any,
        max_batch: int,
        *,
        copier: Any = None,
        threads: int | None = None,
    ) -> None:
        import torch

        self.torch = torch
        self.specs = tuple(specs)
        self.device = device
        self.cuda = device.type == "cuda"
        self.copied_bytes = 0
        self.max_batch = max(1, max_batch)
        self.copier = CudaCopier(device) if copier is None and self.cuda else copier
        sample_bytes = sum(s.sample_bytes for s in self.specs)
        if threads is None:
            threads = gather_threads(self.max_batch * sample_bytes, usable_cores())
        self.threads = threads
        self.chunk_rows = chunk_rows(self.max_batch, sample_bytes, self.threads)
        self.slots = ring_slots(self.max_batch, self.chunk_rows, self.threads)
        self._idle: list[Ring] = []  # rings no iterator uses; two live iterators never share slots
        self._crews: list[
            GatherCrew
        ] = []  # every ring's threads, stopped by close() or when this is collected
        self._closed = False
        self._lock = threading.Lock()
        # The threads reference their crew, never this object: a loader dropped without close() is
        # collected, and this stops its threads (which would otherwise wait forever, holding pinned memory).
        weakref.finalize(self, stop_crews, self._crews)
        self._own: Ring | None = None  # batch()'s ring, and the slot it filled last
        self._own_turn = -1

    def describe(self) -> str:
        """One line for explain(): how batches reach the device."""
        how = f"{self.threads} background thread(s)" if self.threads else "the iterating thread"
        return (
            f"batches gathered by {how} into a ring of {self.slots} pinned buffers, "
            f"copied non_blocking on a side stream"
        )

    def batch(self, arrays: dict[str, np.ndarray], indices: np.ndarray) -> tuple[Any, ...]:
        """One batch, gathered here: ``indices`` rows of every field, as tensors on the device."""
        if self.copier is None:
            return tuple(self.torch.from_numpy(np.take(arrays[s.name], indices, axis=0)) for s in self.specs)
        if self._own is None:
            self._own = Ring(self.copier, self.specs, self.max_batch, self.slots)
        ring = self._own
        slot = self._own_turn = (self._own_turn + 1) % self.slots
        if ring.events[slot] is not None:
            self.copier.wait(ring.events[slot])  # the copy that last read this slot is done
        ring.gather(slot, [arrays[s.name] for s in self.specs], indices, 0, len(indices))
        return self._send(ring, slot, len(indices))

    def batches(
        self, arrays: dict[str, np.ndarray], index_batches: Iterable[np.ndarray]
    ) -> Iterator[tuple[Any, ...]]:
        """One batch per element of ``index_batches``, in order; on CUDA gathered ahead (see the module)."""
        if self.copier is None:
            for indices in index_batches:
                yield tuple(
                    self.torch.from_numpy(np.take(arrays[s.name], indices, axis=0)) for s in self.specs
                )
            return
        ring = self._take_ring()
        try:
            fields = [arrays[s.name] for s in self.specs]
            if self.threads == 0:
                yield from self._inline(ring, fields, index_batches)
            else:
                if ring.crew is None:
                    ring.crew = GatherCrew(ring, self.copier, self.chunk_rows, self.threads)
                    with self._lock:
                        self._crews.append(ring.crew)
                yield from ring.crew.serve(self._send, fields, iter(index_batches))
        finally:
            with self._lock:
                closed = self._closed
                if not closed:
                    self._idle.append(ring)
            if closed and ring.crew is not None:
                ring.crew.stop()

    def close(self) -> None:
        """Stop the gather threads and drop the pinned rings (torch's host allocator keeps a block
        until the copies that read it finish)."""
        with self._lock:
            self._closed = True
            self._idle.clear()
            crews = list(self._crews)
        stop_crews(crews)
        self._own = None

    def _inline(
        self, ring: Ring, fields: list[np.ndarray], index_batches: Iterable[np.ndarray]
    ) -> Iterator[tuple[Any, ...]]:
        for k, indices in enumerate(index_batches):
            slot = k % self.slots
            if ring.events[slot] is not None:
                self.copier.wait(ring.events[slot])
            ring.gather(slot, fields, indices, 0, len(indices))
            yield self._send(ring, slot, len(indices))

    def _send(self, ring: Ring, slot: int, rows: int) -> tuple[Any, ...]:
        staged = ring.staged(slot, rows)
        out, ring.events[slot] = self.copier.copy(staged)
        self.copied_bytes += sum(t.numel() * t.element_size() for t in staged)
        return out

    def _take_ring(self) -> Ring:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Ring(self.copier, self.specs, self.max_batch, self.slots)


def torch_dtype(dtype: np.dtype) -> Any:
    import torch

    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
