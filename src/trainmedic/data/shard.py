"""Sharding an epoch across the ranks of a multi-process run: what DistributedSampler does, built in.

Every rank computes the same seeded epoch order (``order.py``) and serves its own part of it, in
one of two layouts:

- **strided** (a full shuffle, the default): rank ``r`` of ``W`` takes the positions
  ``r, r + W, r + 2W, ...``. The ranks together serve, at each step, one contiguous stretch of
  the epoch order — the samples a single process with ``batch_size * W`` would have served at
  that step — as DistributedSampler does.
- **contiguous** (``shuffle_block > 1`` or ``shuffle=False``, orders that keep neighbouring
  samples together for read locality): rank ``r`` takes the ``r``-th of ``W`` equal stretches of
  the order. Striding such an order would hand every rank a few rows of every storage chunk, so
  each rank would read and decompress every chunk (``W`` times the reads of the whole job); a
  stretch of whole blocks is read by its rank alone.

Either way every rank serves the same number of batches, which a DDP loop needs (a rank that
runs out first leaves the others waiting in an all-reduce forever). When the length does not
divide by ``W``:

- ``drop_last=False`` pads, as DistributedSampler does: the order is extended by repeating its
  first samples until it divides, so a few samples (fewer than ``W``) are served twice per
  epoch and none is left out;
- ``drop_last=True`` drops the last ``length % W`` samples of the epoch's order (a different
  few each shuffled epoch) and then each rank's last short batch, so every batch is full.

Which rank a process is comes from ``shard=``: ``"auto"`` asks ``torch.distributed`` (when it is
initialised) and else the ``RANK``/``WORLD_SIZE`` variables torchrun sets; ``False`` serves
everything; ``(rank, world_size)`` says it outright.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainmedic.errors import DataError


@dataclass(frozen=True)
class Shard:
    """This process's part of every epoch: rank ``rank`` of ``world_size``, found ``how``."""

    rank: int = 0
    world_size: int = 1
    how: str = "not sharded"
    #: Each rank one stretch of the order instead of every W-th position (see module docstring).
    contiguous: bool = False

    def samples(self, length: int, drop_last: bool) -> int:
        """Samples this rank serves per epoch (padding included)."""
        return length // self.world_size if drop_last else -(-length // self.world_size)

    def indices(self, order: np.ndarray, drop_last: bool) -> np.ndarray:
        """This rank's positions of the epoch ``order``, padded or cut so every rank gets as many."""
        if self.world_size == 1:
            return order
        length = len(order)
        if drop_last:
            order = order[: length - length % self.world_size]
        elif length % self.world_size:
            pad = self.world_size - length % self.world_size
            # Fewer samples than ranks: repeat the whole order as often as needed (DistributedSampler too).
            order = np.concatenate([order, np.resize(order, pad)])
        if self.contiguous:
            per = len(order) // self.world_size
            return order[self.rank * per : (self.rank + 1) * per]
        return order[self.rank :: self.world_size]

    def describe(self, length: int, drop_last: bool) -> str:
        if self.world_size == 1:
            return f"shard: none, every sample on this process ({self.how})"
        mine = self.samples(length, drop_last)
        positions = (
            f"positions {self.rank * mine} to {(self.rank + 1) * mine - 1} of the epoch order, one stretch so "
            f"this rank reads its own blocks"
            if self.contiguous
            else f"positions {self.rank}, {self.rank + self.world_size}, … of the epoch order"
        )
        line = (
            f"shard: rank {self.rank} of {self.world_size}: {mine} of {length} samples per epoch "
            f"({positions}; {self.how})"
        )
        extra = length % self.world_size
        if extra and drop_last:
            line += f"; the last {extra} of each epoch's order are dropped so every rank serves as many"
        elif extra:
            line += (
                f"; the order is padded with its first {self.world_size - extra} so every rank serves as many "
                f"(those are served twice per epoch)"
            )
        return line


def resolve_shard(shard: Any) -> Shard:
    """``shard=`` of :func:`trainmedic.data.load` as a :class:`Shard`, or DataError saying what is wrong."""
    if shard is False or shard is None:
        return Shard(how="shard=False")
    if isinstance(shard, str) and shard == "auto":
        return _auto()
    if isinstance(shard, (tuple, list)) and len(shard) == 2:
        rank, world = shard
        return _checked(rank, world, f"shard={tuple(shard)!r}", "shard=(rank, world_size)")
    raise DataError(
        f"shard={shard!r} is not understood; expected 'auto' (the rank and world size of torch.distributed "
        f"or torchrun), False (every process serves every sample) or (rank, world_size), e.g. shard=(1, 4)."
    )


def _auto() -> Shard:
    dist = sys.modules.get("torch.distributed")  # never imports torch.distributed for a 1-process run
    if dist is not None and dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        if world > 1:
            return _checked(dist.get_rank(), world, "torch.distributed", "torch.distributed")
        return Shard(how="torch.distributed has a world size of 1")
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return Shard(how="shard='auto': torch.distributed is not initialised and RANK/WORLD_SIZE are not set")
    try:
        rank_n, world_n = int(rank), int(world)
    except ValueError:
        raise DataError(
            f"shard='auto' read RANK={rank!r} and WORLD_SIZE={world!r} from the environment, which are not whole "
            f"numbers; fix them (torchrun sets both), or pass shard=(rank, world_size) or shard=False."
        ) from None
    if world_n == 1:
        return Shard(how="WORLD_SIZE=1")
    return _checked(
        rank_n, world_n, "RANK/WORLD_SIZE from torchrun", "RANK and WORLD_SIZE in the environment"
    )


def _checked(rank: Any, world: Any, how: str, given: str) -> Shard:
    for name, value in (("rank", rank), ("world_size", world)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise DataError(
                f"{given}: {name}={value!r} is a {type(value).__name__}; expected a whole number, e.g. shard=(0, 2)."
            )
    rank, world = int(rank), int(world)
    if world < 1:
        raise DataError(
            f"{given}: world_size={world} is not allowed; expected the number of processes, at least 1."
        )
    if not 0 <= rank < world:
        raise DataError(
            f"{given}: rank={rank} is outside [0, {world}); expected a rank from 0 to {world - 1} for "
            f"world_size={world}."
        )
    return Shard(rank, world, how)
