"""memory_bandwidth: the kernels are limited by memory traffic, not by FLOPs (GPU only)."""

from __future__ import annotations

from trainmedic.run.diagnose.rules.base import Advice, Context, at
from trainmedic.run.diagnose.rules.compute import tune_pointer


def advise(kind: str, ctx: Context) -> Advice:
    return Advice(
        f"Memory-bandwidth-bound kernels{at(ctx)}",
        "Raise arithmetic intensity: fuse elementwise chains with `torch.compile(model)`, use "
        "bf16 to halve the bytes moved, `channels_last` for convolutions; a larger batch does "
        f"not help here (a bandwidth-bound 3D U-Net ran slower at batch 4 than at batch 2). {tune_pointer(ctx)}",
        factor=1.7,
    )
