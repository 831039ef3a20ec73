"""How each tensor of a traced step grows with the batch, measured at two batch sizes.

One shape cannot say which axis is the batch: nanoGPT's logits are ``[12288, 50304]`` at batch
12, where 12288 is batch × sequence folded by a ``view(-1, V)``, and a hidden size of 768 looks
like a batch of 768. So the plan traces the step a second time at another batch and pairs each
storage with its twin: the same op, at the same line, in the same phase, with the same dtype and
rank, the n-th such storage in both traces (the same program ran, only the batch changed). An
axis whose size moved in proportion to the batch is ``k × B``; one that did not move does not
grow with it. A step whose control flow depends on the batch pairs nothing at the lines where
the counts differ, and those tensors say so rather than guess.

Axes that do not move are named where the build says what they are: ``S`` for the length of
token-id inputs (an integer ``[B, S]`` tensor) and ``V`` for the vocabulary (an ``nn.Embedding``
as wide as an output layer, as a language model's token table and ``lm_head`` are).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainmedic.plan.tracker import Allocation

#: How a tensor's bytes follow the batch.
NONE = "none"  # no axis moved: parameters-like, a fixed table, a vocabulary-wide buffer
LINEAR = "linear"  # one axis is k × B: activations, logits
FASTER = "faster"  # several axes move with it (a B × B pairwise cost), or not in proportion

_Key = tuple[str, str, str, str, int]


@dataclass(frozen=True)
class Growth:
    """One tensor at the planned batch against its twin at the other traced batch."""

    #: Per axis: the multiple of the batch it is (``Fraction(1)``: B itself; ``1024``: B·S
    #: folded), or None for an axis that did not move.
    per_axis: tuple[Fraction | None, ...]
    other_batch: int
    other_bytes: int

    @property
    def kind(self) -> str:
        moved = [f for f in self.per_axis if f is not None]
        if not moved:
            return NONE
        if len(moved) == 1 and all(f > 0 for f in moved):
            return LINEAR
        return FASTER


def twins(allocations: dict[int, Allocation], other: dict[int, Allocation]) -> dict[int, Allocation]:
    """Each storage of one trace paired with the one the other trace's same op made in its place."""
    mine, theirs = _by_key(allocations), _by_key(other)
    paired: dict[int, Allocation] = {}
    for key, sids in mine.items():
        matches = theirs.get(key)
        if matches is None or len(matches) != len(sids):
            continue  # the step ran differently at the other batch: no pairing is believable
        for sid, twin in zip(sids, matches):
            paired[sid] = other[twin]
    return paired


def _by_key(allocations: dict[int, Allocation]) -> dict[_Key, list[int]]:
    keyed: dict[_Key, list[int]] = defaultdict(list)
    for sid, alloc in allocations.items():  # birth order: the order the step made them in
        keyed[(alloc.where, alloc.op, alloc.phase, alloc.dtype, len(alloc.shape))].append(sid)
    return keyed


def growth_of(alloc: Allocation, twin: Allocation | None, batch: int, other_batch: int) -> Growth | None:
    """How ``alloc`` (traced at ``batch``) grows, from its ``twin`` (traced at ``other_batch``)."""
    if twin is None or other_batch == batch or len(twin.shape) != len(alloc.shape):
        return None
    per_axis: list[Fraction | None] = []
    for mine, theirs in zip(alloc.shape, twin.shape):
        if mine == theirs:
            per_axis.append(None)
        elif mine * other_batch == theirs * batch:
            per_axis.append(Fraction(mine, batch))
        else:
            per_axis.append(Fraction(-1))  # moved, but not in proportion (padding, a B² axis)
    return Growth(tuple(per_axis), other_batch, twin.nbytes)


def other_batch(batch: int) -> int:
    """The second batch a plan traces: half (what gradient accumulation over 2 would run), or 2
    for a plan at batch 1."""
    return batch // 2 if batch >= 2 else 2


def named_sizes(model: Any, inputs: list[Any], batch: int) -> dict[int, str]:
    """Axis sizes that have a name in this build (``inputs``: its input tensors): the token
    sequence and the vocabulary."""
    import torch

    names: dict[int, str] = {}
    for tensor in inputs:
        if tensor.dim() == 2 and tensor.shape[0] == batch and not tensor.is_floating_point():
            if tensor.shape[1] > 1 and tensor.shape[1] != batch:
                names[int(tensor.shape[1])] = "S"
                break
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    # The vocabulary is the table the logits span (an output layer as wide as it); a lone table
    # is one too. A position table (as long as the block) is neither.
    widths = {m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)}
    spanned = [m.num_embeddings for m in tables if m.num_embeddings in widths]
    candidates = spanned or ([tables[0].num_embeddings] if len(tables) == 1 else [])
    vocabulary = max((n for n in candidates if n not in names and n > 1), default=None)
    if vocabulary is not None:
        names[int(vocabulary)] = "V"
    return names
