"""Serve batches from the fastest memory tier that fits, straight from HDF5, Zarr, NumPy, SQL or a Dataset.

    from trainmedic import data
    loader = data.load("signals.h5", fields=["x", "y"], batch_size=256, seed=0, device="cuda")
    print(loader.tier, loader.explain())
    for epoch in range(10):
        loader.set_epoch(epoch)
        for x, y in loader:
            ...

Layers: ``sources/`` read (one file per format), ``choose`` picks the tier, ``tiers/`` hold the
samples and gather batches, ``transfer`` moves them to the device, ``loader`` keeps the position.
Nothing here prints; progress goes to a callback that ``trainmedic.progress`` draws.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainmedic.data.cache import default_cache_root
from trainmedic.data.choose import Resources, choose_tier, measure_resources
from trainmedic.data.loader import Loader
from trainmedic.data.materialize import Progress, progress_for, read_into_host
from trainmedic.data.ray_build import CacheBuild, build_cache
from trainmedic.data.sources import open_source
from trainmedic.data.sources.arrays import ArraySource
from trainmedic.errors import DataError, SourceError, require
from trainmedic.units import format_bytes, format_seconds

__all__ = ["CacheBuild", "Loader", "Progress", "Resources", "build_cache", "load"]


def load(
    source: Any,
    fields: list[str] | None = None,
    batch_size: int = 256,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    tier: str = "auto",
    device: Any = "cpu",
    query: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    *,
    schema: dict | None = None,
    shuffle_block: int = 1,
    vram_headroom: Any = 0.5,
    ram_budget: int | None = None,
    progress: bool | Progress | None = None,
    shard: Any = "auto",
) -> Loader:
    """A loader of ``source`` in batches of ``batch_size``, tensors in ``fields`` order on ``device``.

    ``source``: an HDF5 file, a Zarr store, a ``.npy`` file or folder of them, an SQLAlchemy URL
    with ``query=``, a ``torch.utils.data.Dataset`` or a dict of arrays/tensors. ``tier``: "auto"
    (see :mod:`trainmedic.data.choose`), "vram", "ram", "disk" or "stream". ``schema`` declares
    dtype and shape of SQL BLOB/array columns, e.g. ``{"x": ("float32", (64,))}``.
    ``shuffle_block`` > 1 shuffles blocks of consecutive samples (read locality for ``stream``).
    ``vram_headroom``: VRAM kept for the model, in bytes, as a share of the card, or a
    ``trainmedic.plan`` Plan of the training step (its reserved bytes).
    ``progress``: None draws a bar on a terminal while the source is read; False never; or an
    object with ``start/advance/stop``.
    ``shard``: in a multi-process run each rank serves its own part of every epoch, as
    DistributedSampler does (see :mod:`trainmedic.data.shard`; ``len(loader)`` is per rank).
    "auto" takes the rank and world size from torch.distributed when it is initialised, else from
    torchrun's RANK/WORLD_SIZE; False serves every sample on every process; ``(rank, world_size)``
    says it outright. With ``tier="disk"`` the ranks of one node build the cache once and share it.
    """
    require("torch", "torch", "trainmedic.data")
    import torch

    batch_size = _positive_int("batch_size", batch_size)
    from trainmedic.data.shard import resolve_shard

    ranks = resolve_shard(shard)  # checked before the source is read: a bad shard= fails fast
    shuffle_block = _positive_int("shuffle_block", shuffle_block)
    if not isinstance(seed, int):
        raise DataError(f"seed={seed!r} is a {type(seed).__name__}; expected an int.")
    if isinstance(fields, str):
        fields = [fields]
    device = _device(torch, device)
    bar = progress_for(progress)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_root()

    opened = open_source(source, fields, query=query, schema=schema)
    read_first = None
    if opened.length is None and tier in ("auto", "ram", "vram"):
        # A query's size is known only once read: read it into RAM, then choose with real numbers.
        arrays, seconds = read_into_host(opened, bar)
        description, kind = opened.description, opened.kind
        opened.close()
        opened = ArraySource(arrays, None, description=description, kind=kind)
        read_first = f"ran the query once: {opened.length} rows, {format_bytes(opened.nbytes)} in {format_seconds(seconds)}"
    if opened.length == 0:
        raise SourceError(f"{opened.description} has 0 samples; there is nothing to serve.")
    nbytes = opened.nbytes if opened.nbytes is not None else 0
    decision = choose_tier(
        tier,
        nbytes,
        cuda=device.type == "cuda",
        random_access=opened.random_access,
        resources=measure_resources(device, cache_root),
        vram_headroom=vram_headroom,
        ram_budget=ram_budget,
        # Every rank of this node holds its own RAM tier (a disk cache's pages are shared).
        local_ranks=_local_ranks() if ranks.world_size > 1 else 1,
    )
    served = _build_tier(decision.tier, opened, device, batch_size, cache_root, bar)
    if read_first is not None:
        served.facts.insert(0, read_first)
    return Loader(
        opened,
        served,
        decision,
        batch_size=batch_size,
        shuffle=bool(shuffle),
        seed=seed,
        drop_last=bool(drop_last),
        shuffle_block=shuffle_block,
        device=device,
        shard=ranks,
    )


def _build_tier(name: str, source: Any, device: Any, batch_size: int, cache_root: Path, bar: Progress) -> Any:
    if name == "vram":
        from trainmedic.data.tiers.vram import VramTier

        return VramTier(source, device, bar)
    if name == "ram":
        from trainmedic.data.tiers.ram import RamTier

        return RamTier(source, device, batch_size, bar)
    if name == "disk":
        from trainmedic.data.tiers.disk import DiskTier

        return DiskTier(source, device, batch_size, cache_root, bar)
    from trainmedic.data.tiers.stream import StreamTier

    return StreamTier(source, device, batch_size)


def _local_ranks() -> int:
    """torchrun's processes on this node (LOCAL_WORLD_SIZE), 1 when it is not set or not a number."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DataError(f"{name}={value!r} is not allowed; expected a positive int.")
    return value


def _device(torch: Any, device: Any) -> Any:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise DataError(
            f"device={device!r} is not a torch device; expected e.g. 'cpu', 'cuda' or 'cuda:1'."
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DataError(
                f"device={str(device)!r} but torch.cuda.is_available() is False (a CPU build of torch, or no GPU "
                f"visible); pass device='cpu' or install a CUDA build of torch."
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device
