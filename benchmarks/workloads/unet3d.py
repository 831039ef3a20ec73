"""A seed-002-shaped workload: a small 3D U-Net regressing a dose volume from CT-like channels.

OpenKBP trained a 3D U-Net on 128³ volumes (64 filters) and found batch 2 faster than batch 4:
its 3D convolutions and the elementwise layers around them are limited by memory traffic. This
one keeps the shape of that network (two levels, skip connection, instance norm + ReLU after
each convolution, trilinear upsampling, L1 loss, Adam) at 40³ voxels and 8-16 channels, so one
configuration measures in well under a minute on a 2-core CPU.

A CPU's ridge point is low (a 2-core VM: ~60 GFLOP/s over ~26 GB/s, about 2 FLOP/byte) and
these dense 3D convolutions do ~16 FLOP/byte: compute-bound on this CPU, while the same counted
step under an RTX 3090's roofs (ridge ~38 FLOP/byte) is bandwidth-bound, as seed 002 found.
"""

from __future__ import annotations

import torch
from torch import nn

SIZE = 40
IN_CHANNELS = 4  # CT plus structure masks, as OpenKBP's inputs
WIDTH = 8


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1),
        nn.InstanceNorm3d(cout, affine=True),
        nn.ReLU(inplace=True),
        nn.Conv3d(cout, cout, 3, padding=1),
        nn.InstanceNorm3d(cout, affine=True),
        nn.ReLU(inplace=True),
    )


class UNet3d(nn.Module):
    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.down = block(IN_CHANNELS, width)
        self.bottom = block(width, 2 * width)
        self.up = block(3 * width, width)
        self.head = nn.Conv3d(width, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.down(x)
        deep = self.bottom(nn.functional.max_pool3d(skip, 2))
        deep = nn.functional.interpolate(deep, scale_factor=2, mode="trilinear", align_corners=False)
        return self.head(self.up(torch.cat([skip, deep], dim=1)))


def build(batch_size: int) -> dict:
    torch.manual_seed(0)
    model = UNet3d()
    volumes = torch.randn(batch_size, IN_CHANNELS, SIZE, SIZE, SIZE)
    dose = torch.rand(batch_size, 1, SIZE, SIZE, SIZE)
    return dict(
        model=model,
        inputs=volumes,
        optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
        loss_fn=lambda out: nn.functional.l1_loss(out, dose.to(out.device)),
    )
