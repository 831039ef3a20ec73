"""The loader: a cursor over seeded epochs of batches, served by one tier.

The loader is a position — (epoch, batches served) — over an endless sequence of epochs whose
orders depend only on the seed. Iterating serves the rest of the current epoch and then moves the
cursor to the next one; ``set_epoch(n)`` jumps to the start of epoch ``n`` (and does nothing when
the cursor is already inside epoch ``n``, which is what makes ``load_state_dict`` then the usual
``for epoch in range(start, epochs): loader.set_epoch(epoch)`` loop resume mid-epoch). The state
is the position plus what fixes the order, so a restored loader yields exactly the batches an
uninterrupted one would have.

In a multi-process run each rank serves its ``shard`` of every epoch's order (``shard.py``); the
position counts this rank's batches, which every rank advances in step, so one rank's state
resumes any rank of a run with the same number of processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from trainmedic.data.choose import Decision
from trainmedic.data.order import batch_count, batch_slices, epoch_order
from trainmedic.data.shard import Shard
from trainmedic.data.sources.base import Source
from trainmedic.data.tiers.base import Tier
from trainmedic.errors import ResumeError
from trainmedic.units import format_bytes

STATE_FORMAT = "trainmedic.data.loader/1"


class Loader:
    """Batches of ``fields`` as tensors on ``device``; build one with :func:`trainmedic.data.load`."""

    def __init__(
        self,
        source: Source,
        tier: Tier,
        decision: Decision,
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        shuffle_block: int,
        device: Any,
        shard: Shard | None = None,
    ) -> None:
        self._source = source
        self._tier = tier
        self._decision = decision
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.shuffle_block = shuffle_block
        self.device = device
        self.fields: tuple[str, ...] = source.fields
        self.length: int = int(source.length or 0)
        shard = shard or Shard()
        # Orders that keep neighbours together (for read locality) are split into stretches, not strided.
        self.shard = shard = dataclasses.replace(shard, contiguous=not shuffle or shuffle_block > 1)
        self.rank, self.world_size = shard.rank, shard.world_size
        #: Samples this rank serves per epoch: its shard of ``length`` (all of it without sharding).
        self.samples_per_epoch = shard.samples(self.length, drop_last)
        self.epoch = 0
        self._position = 0  # batches of the current epoch already served
        self._iteration = 0  # counts iter() calls; only the newest iterator moves the cursor

    # -- the contract ---------------------------------------------------------------------------

    @property
    def tier(self) -> str:
        return self._tier.name

    def __len__(self) -> int:
        """Batches per epoch on this rank (every rank serves as many)."""
        return batch_count(self.samples_per_epoch, self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        self._iteration += 1
        mine = self._iteration  # a newer iter() takes the cursor over; this one then stops
        epoch, start = self.epoch, self._position
        if start >= len(self):
            # Restored from a state taken on the epoch's last batch: that epoch is over. Yield
            # nothing, so `set_epoch(e)` + `for b in loader` with the epoch the user saved, then
            # `set_epoch(e + 1)`, serve exactly what an uninterrupted run would have.
            self.epoch, self._position = epoch + 1, 0
            return
        order = self.order(epoch)
        for batch in self._tier.epoch(
            order, batch_slices(len(order), self.batch_size, self.drop_last, start)
        ):
            if self.epoch != epoch or self._iteration != mine:  # the cursor moved elsewhere
                return
            self._position += 1
            yield batch
        if self.epoch == epoch and self._iteration == mine and self._position >= len(self):
            self.epoch, self._position = epoch + 1, 0

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` next; inside that epoch already (after a resume), keep the position."""
        epoch = int(epoch)
        if epoch != self.epoch:
            self.epoch, self._position = epoch, 0

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is and what fixes its order: plain values, safe for torch.save/JSON."""
        return {
            "format": STATE_FORMAT,
            "epoch": self.epoch,
            "batches_served": self._position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_block": self.shuffle_block,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "length": self.length,
            "fields": list(self.fields),
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next batch is the one after the last served before it."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ResumeError(
                f"the state given to load_state_dict is not a trainmedic.data loader state "
                f"(format {state.get('format') if isinstance(state, dict) else type(state).__name__!r}); "
                f"pass what loader.state_dict() returned."
            )
        saved_world = state.get("world_size", 1)  # states from before sharding: one process
        if saved_world != self.world_size:
            raise ResumeError(
                f"the saved loader was rank {state.get('rank', 0)} of world_size={saved_world} processes and this one "
                f"is rank {self.rank} of world_size={self.world_size}; each rank's share of an epoch depends on the "
                f"number of processes, so resuming would serve some samples twice and others never. Resume with "
                f"{saved_world} process(es) (e.g. torchrun --nproc-per-node {saved_world}), or skip load_state_dict "
                f"and start at the next epoch boundary: loader.set_epoch({int(state.get('epoch', 0)) + 1})."
            )
        # Another rank's state is accepted: every rank serves as many batches per epoch and a DDP
        # loop advances them together, so the position is the same on all ranks (a checkpoint
        # written by rank 0 resumes rank 1); the shard itself comes from this loader's rank.
        for key in ("length", "batch_size", "seed", "shuffle", "shuffle_block", "drop_last", "fields"):
            mine = list(self.fields) if key == "fields" else getattr(self, key)
            if state.get(key) != mine:
                raise ResumeError(
                    f"the saved loader had {key}={state.get(key)!r} and this one has {key}={mine!r}; resuming would "
                    f"serve different batches than the interrupted run. Build the loader with {key}={state.get(key)!r}, "
                    f"or start a fresh run without load_state_dict."
                )
        self.epoch = int(state["epoch"])
        self._position = int(state["batches_served"])

    def explain(self) -> str:
        """Which tier serves the data and why, in numbers; how the order and resume work."""
        source = self._source
        specs = ", ".join(s.describe() for s in source.specs)
        n_batches = len(self)
        mine = self.samples_per_epoch
        last = (
            mine - (n_batches - 1) * self.batch_size if n_batches and not self.drop_last else self.batch_size
        )
        lines = [
            f"source: {source.kind} {source.description}",
            f"data: {self.length} samples × {format_bytes(source.sample_bytes)} = {format_bytes(self.length * source.sample_bytes)} ({specs})",
            *self._decision.lines,
            f"tier: {self.tier} — " + "; ".join(self._tier.facts),
            f"batches: {n_batches} of {self.batch_size} per epoch"
            + (f" (last {last})" if last != self.batch_size else "")
            + (", last short batch dropped" if self.drop_last and mine % self.batch_size else "")
            + f", tensors on {self.device}",
            self.shard.describe(self.length, self.drop_last),
            self._order_line(),
            f"position: epoch {self.epoch}, {self._position} of {n_batches} batches served (state_dict() resumes here)",
        ]
        return "\n".join(lines)

    # -- helpers -------------------------------------------------------------------------------

    def order(self, epoch: int) -> np.ndarray:
        """The sample indices this rank serves in epoch ``epoch``, in order (the same on every tier)."""
        order = epoch_order(
            self.length, shuffle=self.shuffle, seed=self.seed, epoch=epoch, shuffle_block=self.shuffle_block
        )
        return self.shard.indices(order, self.drop_last)

    def _order_line(self) -> str:
        if not self.shuffle:
            return "order: sequential (shuffle=False)"
        block = f", blocks of {self.shuffle_block} consecutive samples" if self.shuffle_block > 1 else ""
        line = f"order: shuffled per epoch from seed {self.seed}{block}; the same on every tier"
        chunk = self._source.chunk_length
        if self.tier == "stream" and self.shuffle_block < chunk:
            # A window's rows then sit a few rows apart across the whole file: each window reads
            # most chunks again (3x the data per epoch on a 396 MB file, benchmarks/data_tiers.py).
            line += (
                f"\ntip: shuffle_block={chunk} (the storage chunk length) reads each chunk once per epoch; "
                f"epochs streamed 4x faster that way in benchmarks/data_tiers.py (the order changes)"
            )
        return line

    def keras(self, inputs: Any = None, targets: Any = None, sample_weights: str | None = None) -> Any:
        """These batches as a ``keras.utils.PyDataset`` for ``model.fit`` (``inputs``/``targets``: field
        names; the epochs follow this loader's seeded orders). See :mod:`trainmedic.data.keras_feed`."""
        from trainmedic.data.keras_feed import keras_dataset

        return keras_dataset(self, inputs, targets, sample_weights)

    def close(self) -> None:
        self._tier.close()
        self._source.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shard = f" rank={self.rank}/{self.world_size}" if self.world_size > 1 else ""
        return f"<trainmedic.data.Loader tier={self.tier} fields={list(self.fields)} batches={len(self)}{shard} device={self.device}>"
