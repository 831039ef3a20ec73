"""GPU-only, memory-bandwidth-bound: thin-channel 3D blocks on big fp32 volumes.

Reproduces seed 002 (OpenKBP 3D dose prediction on 128^3 CT volumes): "3D convolutions are
memory-bandwidth limited, not compute limited ... GPU utilisation 35 %", and a bigger batch was
*slower*. Here each residual block is GroupNorm -> SiLU -> pointwise (1x1x1) conv -> scale ->
residual add on a 16-channel fp32 volume: every op streams the whole activation through memory
while doing only a handful of FLOPs per element, so the kernels are limited by bandwidth, not
by arithmetic. Fix: fewer, fused passes (torch.compile / fused norm+activation), bf16/fp16
activations (seed 002's mixed precision), or a smaller resolution.

On a CPU-only machine the volume is shrunk (16^3 instead of 128^3) so the script stays quick.
"""

EXPECT = {"bottleneck": "memory_bandwidth", "kind": "", "gpu_only": True}

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
SIZE = 128 if device == "cuda" else 16  # volume edge: 2 x 16 x 128^3 fp32 = 268 MB per activation
BATCH, CHANNELS, DEPTH = 2, 16, 8


class ResBlock3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(4, CHANNELS)
        self.proj = nn.Conv3d(CHANNELS, CHANNELS, kernel_size=1)
        self.gamma = nn.Parameter(torch.full((1, CHANNELS, 1, 1, 1), 0.1))

    def forward(self, x):
        return x + self.gamma * self.proj(nn.functional.silu(self.norm(x)))  # expect-where


class DoseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv3d(2, CHANNELS, kernel_size=1)  # CT + structure mask channels
        self.blocks = nn.Sequential(*[ResBlock3d() for _ in range(DEPTH)])
        self.head = nn.Conv3d(CHANNELS, 1, kernel_size=1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


torch.manual_seed(0)
ct = torch.rand(BATCH, 1, SIZE, SIZE, SIZE, device=device)
mask = (ct > 0.7).float()
inputs = torch.cat([ct, mask], dim=1)  # stays on the device: no data or transfer cost
dose = 0.5 * ct + mask  # synthetic target dose
model = DoseNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999))  # seed 002's settings
for step in range(args.steps):
    loss = nn.functional.l1_loss(model(inputs), dose)  # mean absolute error, as in OpenKBP
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"memory_bandwidth ({device}): {args.steps} steps, final loss {loss.item():.4f}")
