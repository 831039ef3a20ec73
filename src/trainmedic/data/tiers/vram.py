"""The ``vram`` tier: the whole dataset as stacked device tensors; shuffle and gather on the device.

Loading a database table into VRAM once is typically 10-30x faster than a query per batch. After the load nothing
crosses the PCIe link per step: each epoch uploads its order (8 bytes a sample) once, and every
batch is one ``index_select`` per field on the device.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from trainmedic.data.materialize import Progress, Reading, check_complete
from trainmedic.data.sources.arrays import ArraySource
from trainmedic.data.sources.base import Source
from trainmedic.data.tiers.base import Tier
from trainmedic.data.transfer import torch_dtype
from trainmedic.units import format_bytes, format_seconds


class VramTier(Tier):
    name = "vram"

    def __init__(self, source: Source, device: Any, progress: Progress) -> None:
        super().__init__()
        import torch

        self.torch = torch
        self.device = device
        on_device = _device_tensors(source, device)
        self.tensors = on_device if on_device is not None else self._load(source, progress)
        size = sum(t.numel() * t.element_size() for t in self.tensors)
        self.facts.append(
            f"{format_bytes(size)} on {device}; per step: no host-to-device copy, one gather per field"
        )

    def _load(self, source: Source, progress: Progress) -> list[Any]:
        torch = self.torch
        reading = Reading(source, progress, "loading to VRAM")
        if source.length is not None and source.specs:
            tensors = {
                s.name: torch.empty(
                    (source.length,) + s.shape, dtype=torch_dtype(s.dtype), device=self.device
                )
                for s in source.specs
            }
            for start, chunk in reading:
                for name, values in chunk.items():
                    tensors[name][start : start + len(values)].copy_(
                        torch.from_numpy(np.ascontiguousarray(values))
                    )
            check_complete(source, reading.rows)
        else:  # a query: its size is known only at the end, so stage chunks on the device and join
            parts: dict[str, list[Any]] = {}
            for _, chunk in reading:
                for name, values in chunk.items():
                    parts.setdefault(name, []).append(
                        torch.from_numpy(np.ascontiguousarray(values)).to(self.device)
                    )
            tensors = {name: torch.cat(chunks) for name, chunks in parts.items()}
        self.load_seconds = reading.seconds
        self.facts.append(f"read the source once in {format_seconds(reading.seconds)}")
        return [tensors[s.name] for s in source.specs]

    def epoch(self, order: np.ndarray, slices: Iterable[tuple[int, int]]) -> Iterator[tuple[Any, ...]]:
        order_on_device = self.torch.from_numpy(order).to(self.device)
        for start, stop in slices:
            index = order_on_device[start:stop]
            yield tuple(t.index_select(0, index) for t in self.tensors)

    def close(self) -> None:
        self.tensors = []


def _device_tensors(source: Source, device: Any) -> list[Any] | None:
    """A dict of tensors already on ``device`` is served as it is."""
    if type(source) is not ArraySource:
        return None
    values = [source.array(s.name) for s in source.specs]
    if all(hasattr(v, "device") and v.device == device and not v.requires_grad for v in values):
        return values
    return None
