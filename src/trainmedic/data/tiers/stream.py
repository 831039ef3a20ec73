"""The ``stream`` tier: data larger than RAM, read in sorted, chunk-aligned windows in the background.

The epoch order is cut into windows of consecutive batches (about ``WINDOW_BYTES`` of samples).
A background thread reads the next window while the current one is served: its indices sorted and
merged into contiguous runs (the source reads one selection per run, never a long point list),
then each batch is gathered from the window in the epoch's order. With ``shuffle_block`` as long
as a storage chunk, each window reads whole chunks front to back; with the default full
permutation a window still reads every chunk it touches only once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from trainmedic.data.sources.base import Source
from trainmedic.data.tiers.base import Tier
from trainmedic.data.transfer import HostToDevice
from trainmedic.errors import TierError
from trainmedic.units import format_bytes

#: Samples read per window. Three windows are alive at most (served, queued, being read).
WINDOW_BYTES = 128 * 1024 * 1024


class StreamTier(Tier):
    name = "stream"

    def __init__(
        self, source: Source, device: Any, batch_size: int, window_bytes: int = WINDOW_BYTES
    ) -> None:
        super().__init__()
        if not source.random_access:
            raise TierError(
                f"tier='stream' needs a source that can be read at any row (HDF5, Zarr, NumPy, a dict); "
                f"{source.description} ({source.kind}) is read front to back. Use tier='disk' to cache it."
            )
        self.source = source
        self.batch_size = batch_size
        batches = max(1, window_bytes // max(1, source.sample_bytes * batch_size))
        self.window_rows = batches * batch_size
        self.mover = HostToDevice(source.specs, device, batch_size)
        shown = min(self.window_rows, int(source.length or 0)) or self.window_rows
        self.facts.append(
            f"windows of {shown} samples ({format_bytes(shown * source.sample_bytes)}) "
            f"read in sorted runs by a background thread, {source.chunk_length}-row storage chunks"
        )

    def epoch(self, order: np.ndarray, slices: Iterable[tuple[int, int]]) -> Iterator[tuple[Any, ...]]:
        slices = list(slices)
        if not slices:
            return
        windows = _windows(slices, self.window_rows)
        done = threading.Event()
        ready: queue.Queue = queue.Queue(maxsize=1)
        reader = threading.Thread(
            target=self._read_windows,
            args=(order, windows, ready, done),
            daemon=True,
            name="trainmedic-stream",
        )
        reader.start()
        try:
            for window in windows:
                item = ready.get()
                if isinstance(item, BaseException):
                    raise item
                sorted_rows, arrays = item
                for start, stop in window:
                    positions = np.searchsorted(sorted_rows, order[start:stop])
                    yield self.mover.batch(arrays, positions)
                del arrays
        finally:
            done.set()
            while reader.is_alive():
                try:  # unblock a reader waiting to hand over a window nobody will take
                    ready.get_nowait()
                except queue.Empty:
                    pass
                reader.join(timeout=0.05)

    def _read_windows(
        self,
        order: np.ndarray,
        windows: list[list[tuple[int, int]]],
        ready: queue.Queue,
        done: threading.Event,
    ) -> None:
        try:
            for window in windows:
                rows = np.sort(order[window[0][0] : window[-1][1]])
                arrays = {}
                for spec in self.source.specs:
                    out = np.empty((len(rows),) + spec.shape, dtype=spec.dtype)
                    self.source.read(spec.name, rows, out)
                    arrays[spec.name] = out
                while not done.is_set():
                    try:
                        ready.put((rows, arrays), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if done.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised where the user iterates
            while not done.is_set():
                try:
                    ready.put(exc, timeout=0.1)
                    return
                except queue.Full:
                    continue

    def close(self) -> None:
        self.mover.close()
        self.source.close()


def _windows(slices: list[tuple[int, int]], window_rows: int) -> list[list[tuple[int, int]]]:
    """Group consecutive batch slices into windows of about ``window_rows`` samples."""
    windows: list[list[tuple[int, int]]] = [[]]
    for start, stop in slices:
        if windows[-1] and stop - windows[-1][0][0] > window_rows:
            windows.append([])
        windows[-1].append((start, stop))
    return windows
