"""The fix for each hotspot, chosen by how it grows, with the bytes it saves at this batch.

How a hotspot grows is measured where the plan traced a second batch (``plan/scaling.py``): a
line that grows with the batch shrinks with a smaller micro-batch, one that does not never will,
and saying otherwise steers the user away from the fix that works. Logits (an axis as wide as
the vocabulary) get the fixes that act on them: a loss over chunks of the tokens, and the fp32
copy autocast makes for the loss. Where nothing was measured the advice is read off the shape,
as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainmedic.plan.scaling import FASTER, NONE
from trainmedic.plan.tracker import Allocation
from trainmedic.units import format_bytes


@dataclass(frozen=True)
class LineGrowth:
    """How one hotspot's bytes follow the batch."""

    #: ``scaling.NONE`` / ``LINEAR`` / ``FASTER``; None where no second trace paired its tensors.
    kind: str | None
    other_batch: int | None = None
    #: The line's bytes at the gradient-accumulation batch (half this one), from both traces.
    at_half: int | None = None
    #: Named axes of its largest tensor: ``S`` (sequence), ``V`` (vocabulary).
    names: frozenset[str] = frozenset()
    #: fp32 copies of bf16/fp16 tensors at the line (autocast's for a loss).
    upcast_bytes: int = 0
    #: The paired tensors' bytes at the other batch and at this one.
    at_other: int = 0
    measured: int = 0
    #: Bytes of the line's vocabulary-wide tensors, and of those the forward made (alive at the
    #: peak: kept for backward), what a fused loss and checkpointing act on.
    vocabulary_wide: int = 0
    forward: int = 0


def advise(kind: str, alloc: Allocation, batch_size: int, total: int, line: LineGrowth | None = None) -> str:
    line = line or LineGrowth(None)
    if line.kind is None:
        return _by_shape(kind, alloc, batch_size, total)
    if line.kind == NONE:
        return _fixed(line)
    advice = []
    if kind == "attention":
        advice.append(_attention(alloc, total))
    if kind == "pairwise":
        advice.append(_pairwise(alloc))
    if "V" in line.names:
        advice.append(_logits(line))
    grows = "grows with the batch" + (" and the sequence" if "S" in line.names else "")
    if line.kind == FASTER and line.other_batch and line.measured:
        grows = (
            f"grows faster than the batch ({line.measured / max(line.at_other, 1):.1f}× the bytes for "
            f"{batch_size / line.other_batch:.1f}× the batch)"
        )
    saved = total - line.at_half if line.at_half is not None else 0
    if batch_size >= 2 and saved > 0:
        advice.append(f"{grows}: {_accumulate(batch_size)} and holds {format_bytes(saved)} less here")
    else:
        advice.append(f"{grows}: {_accumulate(batch_size)}")
    if kind not in ("attention", "pairwise") and "V" not in line.names and line.forward:
        advice.append(
            f"or recompute it in backward with torch.utils.checkpoint (up to {format_bytes(line.forward)} "
            "of this line are kept for backward)"
        )
    return "; ".join(advice)


def _fixed(line: LineGrowth) -> str:
    text = "does not grow with the batch, so a smaller batch will not shrink it"
    if "V" in line.names:
        text += "; it is as wide as the vocabulary"
    return text


def _logits(line: LineGrowth) -> str:
    text = (
        "logits over the vocabulary: a fused linear + cross-entropy kernel (or a loss over chunks of the "
        "tokens that recomputes each chunk's logits in backward) never holds all B·S·V of them, "
        f"up to {format_bytes(line.vocabulary_wide)} less here"
    )
    if line.upcast_bytes:
        text += (
            f"; {format_bytes(line.upcast_bytes)} of this line are fp32 copies autocast makes for the loss, "
            "which a loss that reads the bf16/fp16 logits does not need"
        )
    return text


def _attention(alloc: Allocation, total: int) -> str:
    return (
        f"attention scores are materialised ({format_bytes(total)} at S={alloc.shape[-1]}): call "
        "torch.nn.functional.scaled_dot_product_attention, whose flash / memory-efficient kernels keep "
        "O(B·H·S) instead of B·H·S²; or pool tokens before attention (S/4 cuts this 16×)"
    )


def _pairwise(alloc: Allocation) -> str:
    shape = alloc.shape
    numel = math.prod(shape)
    itemsize = alloc.nbytes // max(1, numel) if shape and numel else 4
    n, m = shape[-3], shape[-2]
    lead = math.prod(shape[:-3]) if len(shape) > 3 else 1
    compact = lead * n * m * itemsize
    return (
        f"a broadcast pairwise tensor keeps the feature axis D={shape[-1]}: compute the N·M cost without it "
        f"(torch.cdist(x, y), or ‖x‖² + ‖y‖² − 2·x@yᵀ) for {format_bytes(compact)} instead of {format_bytes(alloc.nbytes)}, "
        "or build it in chunks of rows / use an online (log-sum-exp) Sinkhorn"
    )


def _by_shape(kind: str, alloc: Allocation, batch_size: int, total: int) -> str:
    """Advice from the shape alone, where no second trace measured how the line grows."""
    if kind == "attention":
        return f"{_attention(alloc, total)}; or {_accumulate(batch_size)}"
    if kind == "pairwise":
        return _pairwise(alloc)
    if kind == "batch":
        return f"grows with the batch: {_accumulate(batch_size)}; or recompute it in backward with torch.utils.checkpoint"
    return "no axis of its shape is the batch: a smaller batch is not expected to shrink it"


def _accumulate(batch_size: int) -> str:
    if batch_size < 2:
        return "at batch 1, recompute activations in backward (torch.utils.checkpoint) instead"
    half = math.ceil(batch_size / 2)
    effective = "keeps the effective batch of" if 2 * half == batch_size else "gives an effective batch of"
    return f"batch {half} with gradient accumulation over 2 steps {effective} {2 * half}"
