"""The Checkpointer in a multi-process run (torchrun, torch.distributed): one writer, ranks in step.

With ``torch.distributed`` initialised and more than one process:

- **One decision.** All ranks write and stop at the same step boundary, whichever rank's clock or
  signal asked first. Ranks deciding alone would drift apart: ``every="10m"`` and the deadline
  read each rank's own clock, and torchrun's SIGTERM reaches the ranks at different steps — a
  rank that stopped alone leaves the others blocked in their next all-reduce (NCCL: until its
  10-minute timeout) and nothing of theirs is saved. What every rank computes alike (the first
  save, ``every=N`` steps, phases, ``force``) decides at once; what reads a clock or a signal is
  agreed by an all-reduce of a few integers over a CPU (gloo) group about every ``SYNC_S`` of
  steps (each call when steps are longer; at most ``MAX_CALLS`` calls apart). That all-reduce
  took ~0.7 ms between 2 ranks on the 2-vCPU dev VM: once per call it would cost a short step
  more than the step itself. A signal or the deadline is therefore acted on up to ``SYNC_S``
  later at the pace of the last interval (the deadline looks that far ahead); steps that suddenly
  become much slower stretch that to at most ``MAX_CALLS`` of the new steps.
- **One writer.** Rank 0 writes the checkpoint; every rank's random streams are gathered into it
  (a rank seeded with its own seed draws its own dropout masks). The other ranks then wait for
  rank 0's result — success or the error — so no rank moves on, or exits after a stop, before
  the checkpoint is durable, and a write that failed fails every rank with the reason.
- **One resume.** Every rank reads the same directory and the ranks check that they chose the
  same checkpoint (a directory that is not shared between nodes is named as the problem).
  The world size is recorded; a checkpoint that holds a data position sharded across the ranks
  (a ``trainmedic.data`` loader, a DistributedSampler) is refused by a run of another size,
  since each rank's share of the epoch depends on it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from trainmedic.checkpoint.schedule import DEADLINE_MARGIN_S
from trainmedic.errors import CheckpointError

#: Seconds of steps between two agreements on the clock- and signal-driven decisions.
SYNC_S = 0.25
#: At most this many calls between agreements, however short the steps (and the interval at
#: most doubles from one agreement to the next).
MAX_CALLS = 100
#: How long the first restore/save/close waits for every rank to join the Checkpointer's group:
#: a script that calls it on rank 0 only gets a CheckpointError instead of a hang.
JOIN_TIMEOUT_S = 180.0
#: The key of the random streams of every rank, in rank order, in a multi-process checkpoint.
PER_RANK = "per_rank"


class Ranks:
    """This process's place in the run and the group the Checkpointer talks over."""

    def __init__(self, dist: Any, rank: int, world_size: int, group: Any) -> None:
        self.dist = dist
        self.rank = rank
        self.world_size = world_size
        self.group = group
        self._calls = 0
        self._next_sync = 1
        self._synced_at = time.monotonic()
        self._synced_calls = 0

    @staticmethod
    def detect() -> Ranks | None:
        """The ranks of an initialised torch.distributed run of 2+ processes; None otherwise.

        Collective (it creates the Checkpointer's own gloo group, so that its all-reduces never
        pair with the training's): every rank must call it, which the Checkpointer does at its
        first restore/save/close; a rank alone gets a CheckpointError after JOIN_TIMEOUT_S.
        """
        dist = sys.modules.get("torch.distributed")  # a run that never imported it is one process
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        world = dist.get_world_size()
        if world < 2:
            return None
        # NCCL cannot reduce CPU tensors, and a CUDA tensor would make every save() call wait for
        # the GPU; a gloo group beside it talks over the host.
        from datetime import timedelta

        rank = dist.get_rank()
        try:
            group = dist.new_group(backend="gloo", timeout=timedelta(seconds=JOIN_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - c10d raises store and runtime errors alike
            raise CheckpointError(
                f"the Checkpointer on rank {rank} of {world} waited {JOIN_TIMEOUT_S:.0f} s for the other ranks to call "
                f"restore()/save()/close() too, and they did not ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}). "
                "Under torch.distributed the ranks checkpoint together: call restore, save and close on every rank "
                "(rank 0 writes, the others wait for it), not inside `if rank == 0:`."
            ) from None
        return Ranks(dist, rank, world, group)

    def decide(
        self, reason: str | None, signal_number: int | None, step: int, schedule: Any, now: float
    ) -> tuple[str | None, int | None]:
        """(reason, signal) that every rank reaches alike for this ``save()`` call."""
        import torch

        self._calls += 1
        if self._calls < self._next_sync:
            # Between agreements only what every rank computes alike may write.
            if schedule.must_write:
                return "first", None
            steps = schedule.every_steps
            if steps is not None and schedule.last_step is not None and step - schedule.last_step >= steps:
                return "every", None
            return None, None
        if (
            reason != "deadline"
            and schedule.deadline_at is not None
            and not schedule.deadline_hit
            and (
                now + SYNC_S + schedule.step_seconds + 1.25 * schedule.save_seconds + DEADLINE_MARGIN_S
                >= schedule.deadline_at
            )
        ):
            reason = "deadline"  # the next agreement may come SYNC_S later: act now
        per_call_us = (now - self._synced_at) / max(1, self._calls - self._synced_calls) * 1e6
        flags = torch.tensor(
            [
                int(reason is not None and reason != "deadline"),
                int(reason == "deadline"),
                int(signal_number or 0),
                int(per_call_us),
            ],
            dtype=torch.int64,
        )
        self.dist.all_reduce(flags, op=self.dist.ReduceOp.MAX, group=self.group)
        due, deadline, number, slowest_us = (int(v) for v in flags.tolist())
        # From values every rank now shares: the next agreement comes at the same call everywhere.
        spacing = max(
            1, min(MAX_CALLS, 2 * (self._calls - self._synced_calls), int(SYNC_S * 1e6 / max(1, slowest_us)))
        )
        self._next_sync = self._calls + spacing
        self._synced_at, self._synced_calls = now, self._calls
        if deadline:
            reason = "deadline"
        elif due:
            reason = reason or "every"  # another rank's clock (every="10m") said so
        else:
            reason = None
        return reason, number or None

    def gather(self, value: Any) -> list[Any]:
        """``value`` of every rank, in rank order (picklable values; a few KB)."""
        out: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(out, value, group=self.group)
        return out

    def gather_streams(self, streams: Any) -> dict[str, list[Any]]:
        """Every rank's random streams, in rank order, for rank 0's checkpoint."""
        return {PER_RANK: self.gather(streams)}

    def write_once(
        self, write: Callable[[], Any], received: Callable[[], int | None]
    ) -> tuple[Any, str | None, int | None]:
        """Rank 0 runs ``write``; every rank gets (its result, rank 0's error, the signal any rank
        received meanwhile). The other ranks wait for it here: nobody moves on (or exits after a
        stop) before the checkpoint is durable, and a failed write fails every rank."""
        written = None
        if self.rank == 0:
            try:
                written = write()
            except BaseException as exc:
                self.gather((None, f"{type(exc).__name__}: {exc}", received()))
                raise
        results = self.gather((written, None, received()))
        late = max((r[2] or 0 for r in results), default=0) or None
        return results[0][0], results[0][1], late

    def check_same_choice(self, step: int, path: Any) -> None:
        """CheckpointError on every rank unless every rank resumes from the same checkpoint."""
        name = getattr(path, "name", None)
        choices = self.gather((step, name))
        if len(set(choices)) == 1:
            return
        shown = "; ".join(
            f"rank {r}: {'step ' + str(s) + ' from ' + n if n else 'no checkpoint'}"
            for r, (s, n) in enumerate(choices)
        )
        raise CheckpointError(
            f"the ranks would resume from different checkpoints ({shown}): the checkpoint directory must be the same "
            "folder for every rank, on a file system every node sees (a shared disk), or each node's copy identical."
        )


def streams_of(streams: dict[str, Any], ranks: Ranks | None, notes: list[str]) -> dict[str, Any]:
    """This rank's random streams from a checkpoint (one of several ranks, or of one process)."""
    if PER_RANK not in streams:
        return streams
    per_rank, rank = streams[PER_RANK], ranks.rank if ranks is not None else 0
    if rank < len(per_rank):
        return per_rank[rank]
    notes.append(
        f"the checkpoint holds the random streams of {len(per_rank)} ranks; rank {rank} takes rank 0's."
    )
    return per_rank[0]


def check_world(
    path: Any, manifest: dict[str, Any], objects: dict[str, Any], ranks: Ranks | None
) -> str | None:
    """CheckpointError when a sharded data position would resume at another world size; else a note."""
    saved, current = manifest.get("world_size", 1), world_size(ranks)
    if saved == current:
        return None
    names = [n for n in objects if n in manifest.get("sharded", []) or sharded(objects[n])]
    if names:
        raise world_mismatch(path, saved, current, names)
    return (
        f"{path} was saved by {saved} process(es) and this run has {current}: the objects load as saved, but the "
        "batches per step of the whole run change with the number of processes."
    )


def world_size(ranks: Ranks | None) -> int:
    return ranks.world_size if ranks is not None else 1


def sharded(obj: Any) -> bool:
    """Whether ``obj``'s saved position depends on the number of processes: a sharded
    ``trainmedic.data`` loader, or a DistributedSampler (alone or inside a DataLoader)."""
    if isinstance(getattr(obj, "world_size", None), int) and callable(getattr(obj, "state_dict", None)):
        return obj.world_size > 1
    sampler = obj if hasattr(obj, "num_replicas") else getattr(obj, "sampler", None)
    replicas = getattr(sampler, "num_replicas", 1)
    return isinstance(replicas, int) and replicas > 1


def world_mismatch(path: Any, saved: int, current: int, names: list[str]) -> CheckpointError:
    first = names[0]
    return CheckpointError(
        f"{path} was saved by a run of {saved} process(es) and this run has {current}: {', '.join(repr(n) for n in names)} "
        f"hold(s) a position in data sharded across the ranks, and each rank's share of an epoch depends on the number "
        f"of processes, so the resumed ranks would serve some samples twice and others never. Resume with {saved} "
        f"process(es) (torchrun --nproc-per-node {saved} ...); or restore without {first}= (the model and optimizer "
        f"load at any world size) and start {first} at the next epoch; or give this run a new directory."
    )
