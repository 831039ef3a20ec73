"""Gather a batch from host arrays and move it to the device: one fancy-index op per field.

The gather is single-threaded ``np.take``: ``torch.index_select`` spreads a large batch over
torch's threads and was faster on an idle machine (13.5 against 8 GB/s for 1 MiB batches), but
collapsed to 0.3 GB/s when another process held one of the two cores, waiting on a descheduled
thread every batch, while ``np.take`` kept 7.7 GB/s (benchmarks/data_tiers.py, 2-core VM). Into
the pinned buffer it uses ``mode="clip"``: the default ``mode="raise"`` with ``out=`` buffers the
whole output first (4-5 GB/s), and the indices come from the epoch order, always in range.

On CUDA the gather lands in a pinned buffer that is reused (two slots, so the gather of batch k+1
never overwrites batch k while its copy is in flight), and the copy runs with ``non_blocking`` on
a side stream: it overlaps the kernels of the previous batch, and pinned copies run at the link's
speed (~25 GB/s on PCIe 4 x16) where pageable ones reach about half. The consumer's stream waits
on an event, not the host, and ``record_stream`` keeps the caching allocator from reusing a batch
that is still being copied.

On the CPU every batch is a fresh array: reusing a buffer would silently change batches a user
kept (a list of batches, a validation cache).

On a CUDA run ``trainmedic run`` charges time spent in this module to ``transfer``; on a CPU run
it only gathers, which is ``data``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trainmedic.data.sources.base import FieldSpec


class HostToDevice:
    """Turns (host arrays, batch indices) into a tuple of tensors on ``device``."""

    SLOTS = 2

    def __init__(self, specs: Sequence[FieldSpec], device: Any, max_batch: int) -> None:
        import torch

        self.torch = torch
        self.specs = tuple(specs)
        self.device = device
        self.cuda = device.type == "cuda"
        self.copied_bytes = 0
        if self.cuda:
            self.stream = torch.cuda.Stream(device)
            self.slots = [
                {s.name: torch.empty((max_batch,) + s.shape, dtype=torch_dtype(s.dtype)).pin_memory() for s in self.specs}
                for _ in range(self.SLOTS)
            ]
            self.events: list[Any] = [None] * self.SLOTS
            self.turn = 0

    def batch(self, arrays: dict[str, np.ndarray], indices: np.ndarray) -> tuple[Any, ...]:
        """One batch: ``indices`` rows of every field, as tensors on the device."""
        torch = self.torch
        if not self.cuda:
            return tuple(torch.from_numpy(np.take(arrays[s.name], indices, axis=0)) for s in self.specs)
        slot = self.turn
        self.turn = (self.turn + 1) % self.SLOTS
        if self.events[slot] is not None:
            self.events[slot].synchronize()  # the copy that last read this pinned slot is done
        n = len(indices)
        staged = []
        for s in self.specs:
            pinned = self.slots[slot][s.name][:n]
            np.take(arrays[s.name], indices, axis=0, out=pinned.numpy(), mode="clip")
            staged.append(pinned)
        return self._copy(staged, slot)

    def _copy(self, staged: list[Any], slot: int) -> tuple[Any, ...]:
        torch = self.torch
        # No wait on the consumer stream: the copy reads only the pinned slot (filled on the host
        # above) and writes fresh memory, so it may run under the previous step's kernels.
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            out = tuple(t.to(self.device, non_blocking=True) for t in staged)
            done = torch.cuda.Event()
            done.record(self.stream)
        consumer.wait_event(done)
        for t in out:
            t.record_stream(consumer)
        self.events[slot] = done
        self.copied_bytes += sum(t.numel() * t.element_size() for t in staged)
        return out


def torch_dtype(dtype: np.dtype) -> Any:
    import torch

    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


