"""The fix for each kind of hotspot, with what it buys in bytes where that can be computed."""

from __future__ import annotations

import math

from trainmedic.plan.tracker import Allocation
from trainmedic.units import format_bytes


def advise(kind: str, alloc: Allocation, batch_size: int, total: int) -> str:
    shape = alloc.shape
    itemsize = alloc.nbytes // max(1, math.prod(shape)) if shape and math.prod(shape) else 4
    if kind == "attention":
        seq = shape[-1]
        return (
            f"attention scores are materialised ({format_bytes(total)} at S={seq}): call "
            "torch.nn.functional.scaled_dot_product_attention, whose flash / memory-efficient kernels keep "
            "O(B·H·S) instead of B·H·S²; or pool tokens before attention (S/4 cuts this 16×); "
            f"or {_accumulate(batch_size)}"
        )
    if kind == "pairwise":
        n, m = shape[-3], shape[-2]
        lead = math.prod(shape[:-3]) if len(shape) > 3 else 1
        compact = lead * n * m * itemsize
        return (
            f"a broadcast pairwise tensor keeps the feature axis D={shape[-1]}: compute the N·M cost without it "
            f"(torch.cdist(x, y), or ‖x‖² + ‖y‖² − 2·x@yᵀ) for {format_bytes(compact)} instead of {format_bytes(alloc.nbytes)}, "
            "or build it in chunks of rows / use an online (log-sum-exp) Sinkhorn"
        )
    if kind == "batch":
        return f"grows with the batch: {_accumulate(batch_size)}; or recompute it in backward with torch.utils.checkpoint"
    return "does not grow with the batch, so a smaller batch will not shrink it"


def _accumulate(batch_size: int) -> str:
    if batch_size < 2:
        return "at batch 1, recompute activations in backward (torch.utils.checkpoint) instead"
    half = math.ceil(batch_size / 2)
    effective = "keeps the effective batch of" if 2 * half == batch_size else "gives an effective batch of"
    return f"batch {half} with gradient accumulation over 2 steps {effective} {2 * half}"
