"""The ``ram`` tier: one contiguous array per field in host memory, one gather per batch.

Reading an HDF5 file into RAM once took a per-batch reader from 37 s to 0.46 s a step, and
pre-stacked arrays assemble batches ~10x faster than Python does. This tier is both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainmedic.data.materialize import Progress, read_into_host
from trainmedic.data.sources.arrays import ArraySource
from trainmedic.data.sources.base import Source
from trainmedic.data.tiers.base import HostTier
from trainmedic.units import format_bytes, format_seconds


class RamTier(HostTier):
    name = "ram"

    def __init__(self, source: Source, device: Any, batch_size: int, progress: Progress) -> None:
        super().__init__()
        arrays = _in_memory_arrays(source)
        if arrays is None:
            arrays, self.load_seconds = read_into_host(source, progress)
            size = sum(a.nbytes for a in arrays.values())
            self.facts.append(
                f"read {format_bytes(size)} into RAM once in {format_seconds(self.load_seconds)} "
                f"({_rate(size, self.load_seconds)})"
            )
        else:
            self.facts.append("the arrays are in RAM already: served in place, nothing copied")
        self.serve(arrays, source.specs, device, batch_size)


def _in_memory_arrays(source: Source) -> dict[str, np.ndarray] | None:
    """The source's own arrays when they already sit in host RAM (a dict of arrays or CPU tensors)."""
    if type(source) is not ArraySource:
        return None
    arrays = {}
    for spec in source.specs:
        value = source.array(spec.name)
        if hasattr(value, "detach"):
            if value.device.type != "cpu" or value.requires_grad:
                return None
            value = value.numpy()
        if isinstance(value, np.memmap) or not value.flags.c_contiguous or value.dtype != spec.dtype:
            return None
        arrays[spec.name] = value
    return arrays


def _rate(size: int, seconds: float) -> str:
    return f"{format_bytes(size / seconds)}/s" if seconds > 0 else "instant"
