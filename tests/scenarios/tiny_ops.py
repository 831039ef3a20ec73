"""Tiny-ops-bound: synthetic IQ samples generated one at a time, ~15 tiny tensor ops each.

Reproduces seed 001 (Heimdall synthetic IQ generation): ``generate_iq_sample()`` was called
once per sample, each call doing a clean carrier, multipath, Rayleigh fading, power
normalisation and AWGN on a short signal -- 70,000 small operations whose per-call dispatch
overhead (not the arithmetic) kept the GPU at 28 %. Here each batch is 256 samples of 64 complex
points built in a Python loop and then stacked; the model that consumes them is cheap.
Fix: generate the whole batch at once with batched tensors of shape (256, 64).
"""

EXPECT = {"bottleneck": "tiny_ops", "kind": "", "fixes": "Batch the loop in make_batch() with trainmedic.batch"}

import argparse
import math

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=48)
args, _ = parser.parse_known_args()

BATCH, NUM_POINTS, SAMPLE_RATE = 256, 64, 1e6
PATH_DELAYS = (1, 3, 7)  # multipath echoes, in samples


def make_batch():
    """One sample at a time, like generate_iq_sample() in the original."""
    t = torch.arange(NUM_POINTS) / SAMPLE_RATE
    signals, offsets = [], []
    for _ in range(BATCH):
        freq = torch.empty(()).uniform_(-2e4, 2e4)  # carrier offset to be estimated
        sig = torch.exp(1j * (2 * math.pi * freq * t + 2 * math.pi * torch.rand(())))  # clean carrier
        for delay in PATH_DELAYS:  # multipath
            sig = sig + 0.3 * torch.randn(()) * torch.roll(sig, delay)  # expect-where
        sig = sig * torch.randn((), dtype=torch.cfloat)  # Rayleigh fading
        sig = sig / sig.abs().pow(2).mean().sqrt()  # normalise power
        sig = sig + 0.1 * torch.randn(NUM_POINTS, dtype=torch.cfloat)  # AWGN
        signals.append(torch.view_as_real(sig).flatten())
        offsets.append(freq / 2e4)
    return torch.stack(signals), torch.stack(offsets).unsqueeze(1)


class OffsetEstimator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * NUM_POINTS, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
model = OffsetEstimator()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(args.steps):
    x, target = make_batch()
    loss = nn.functional.mse_loss(model(x), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"tiny_ops: {args.steps} steps, final loss {loss.item():.4f}")
