"""The ``disk`` tier: a memory-mapped contiguous cache file per field, built once under ``cache_dir``.

For data larger than half the RAM but smaller than the disk: the source (a compressed HDF5 file, a
query, a Dataset) is decoded once into raw rows, and every later run maps them. Gathers then come
from the page cache at memory speed for whatever part of the file is hot, and from the SSD in
page-sized reads for the rest — no decompression, no per-sample Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.data.cache import DiskCache
from trainmedic.data.materialize import Progress
from trainmedic.data.sources.base import FieldSpec, Source
from trainmedic.data.tiers.base import HostTier
from trainmedic.units import format_bytes, format_seconds


class DiskTier(HostTier):
    name = "disk"

    def __init__(
        self, source: Source, device: Any, batch_size: int, cache_root: Path, progress: Progress
    ) -> None:
        super().__init__()
        self.cache = DiskCache(cache_root, source)
        arrays = self.cache.load(progress)
        if source.length is None:  # a query served from its cache: it never ran this time
            source.specs = tuple(
                FieldSpec(e["name"], np.dtype(e["dtype"]), tuple(e["shape"]))
                for e in self.cache.manifest["fields"]
            )
            source.length = int(self.cache.manifest["length"])
        size = sum(a.nbytes for a in arrays.values())
        if self.cache.rebuilt_because is None:
            self.facts.append(
                f"reused the cache {self.cache.folder} ({format_bytes(size)}; CRC-32 of "
                f"{self.cache.verified} checked in {format_seconds(self.cache.verify_seconds)})"
            )
        else:
            self.load_seconds = self.cache.seconds
            self.facts.append(
                f"built the cache {self.cache.folder} ({format_bytes(size)} in "
                f"{format_seconds(self.cache.seconds)}): {self.cache.rebuilt_because}"
            )
        if self.cache.took_over:
            self.facts.append(self.cache.took_over)
        if self.cache.waited_for is not None:
            self.facts.append(
                f"waited {format_seconds(self.cache.waited)} for {self.cache.waited_for.describe().split(' (')[0]}, which held "
                f"the cache's build lock: built once, shared by every process loading it"
            )
        if not source.sees_changes:
            self.facts.append(
                f"a change inside {source.kind} data is not detected: delete {self.cache.folder} after changing it"
            )
        self.serve(arrays, source.specs, device, batch_size)
