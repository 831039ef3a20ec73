"""transfer: host-to-device copies of the batch."""

from __future__ import annotations

from trainmedic.run.diagnose.rules.base import Advice, Context, at


def advise(kind: str, ctx: Context) -> Advice:
    # Pageable copies run at about half the pinned rate (PCIe Gen4 ~25 GB/s pinned), and
    # non_blocking copies from pinned memory overlap with compute.
    return Advice(
        f"Copying the batch to the GPU{at(ctx)}",
        "Copy once per batch from pinned memory with overlap: `DataLoader(..., pin_memory=True)` "
        "and `x.to(device, non_blocking=True)`; never `.to(device)` per sample. If the dataset "
        "fits in VRAM, keep it there and index on the device.",
        factor=3.0,
    )
