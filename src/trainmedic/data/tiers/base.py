"""What every tier gives the loader: batches for a slice of an epoch's order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np


class Tier:
    """Where the samples live while they are served. Subclasses fill ``facts`` for explain()."""

    #: "vram", "ram", "disk" or "stream".
    name: str = ""

    def __init__(self) -> None:
        #: Lines explain() shows under the decision: what was loaded, how long it took, where.
        self.facts: list[str] = []
        #: Seconds spent reading the source before the first batch (0 when nothing was read).
        self.load_seconds = 0.0

    def epoch(self, order: np.ndarray, slices: Iterable[tuple[int, int]]) -> Iterator[tuple[Any, ...]]:
        """Yield one tuple of tensors per (start, stop) slice of ``order``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the tier holds (device memory, memory maps, threads)."""


class HostTier(Tier):
    """A tier whose samples sit in host arrays (RAM or memory-mapped): one gather per batch, moved
    to the device by :class:`~trainmedic.data.transfer.HostToDevice`."""

    def serve(self, arrays: dict[str, np.ndarray], specs: tuple, device: Any, batch_size: int) -> None:
        from trainmedic.data.transfer import HostToDevice

        self.arrays = arrays
        self.mover = HostToDevice(specs, device, batch_size)
        if self.mover.copier is not None:
            self.facts.append(self.mover.describe())

    def epoch(self, order: np.ndarray, slices: Iterable[tuple[int, int]]) -> Iterator[tuple[Any, ...]]:
        # On CUDA the mover pulls these index batches ahead of the consumer (background gathers).
        yield from self.mover.batches(self.arrays, (order[start:stop] for start, stop in slices))

    def close(self) -> None:
        self.arrays = {}
        if hasattr(self, "mover"):  # serve() ran
            self.mover.close()
