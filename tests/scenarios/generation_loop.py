"""Tiny-ops-bound with no training step: a per-sample generation job, one sample per iteration.

Reproduces seed 001 as it first ran (Heimdall synthetic IQ data): a plain loop called
``generate_iq_sample()`` once per sample -- no model, no optimizer, no DataLoader, so nothing
marks a step. Each call does a clean carrier, multipath echoes, Rayleigh fading, power
normalisation and AWGN on a short signal: ~50 small operations whose per-call dispatch
overhead, not the arithmetic, is the cost. `trainmedic run` finds the loop the run repeats and
counts its iterations as the steps. (Six echoes and 5,000 samples: with twelve, the echo loop
held a share within noise of the 80 % a counted loop needs, which takes 120 samples (1.2 s) to
decide, and on a fast VM the whole loop of 2,500 samples ran for less than that.)
Fix: ``batch.vectorize(generate_iq_sample)`` over [batch, ...] tensors, or
``batch.generate(generate_iq_sample, params, out=...)`` for the whole job.
"""

EXPECT = {"bottleneck": "tiny_ops", "kind": "per-sample loop", "fixes": "batch.vectorize(generate_iq_sample)", "loop": "for i in range(args.samples):"}

import argparse
import math

import torch

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=5000)
args, _ = parser.parse_known_args()

NUM_POINTS, SAMPLE_RATE = 64, 1e6
PATH_DELAYS = tuple(range(1, 7))  # six multipath echoes, 1-6 samples late
T = torch.arange(NUM_POINTS) / SAMPLE_RATE


def generate_iq_sample():  # expect-where
    t = T
    freq = torch.empty(()).uniform_(-2e4, 2e4)  # carrier offset, the label
    sig = torch.exp(1j * (2 * math.pi * freq * t + 2 * math.pi * torch.rand(())))  # clean carrier
    for delay in PATH_DELAYS:  # multipath
        sig = sig + 0.3 * torch.randn(()) * torch.roll(sig, delay)
    sig = sig * torch.randn((), dtype=torch.cfloat)  # Rayleigh fading
    sig = sig / sig.abs().pow(2).mean().sqrt()  # normalise power
    sig = sig + 0.1 * torch.randn(NUM_POINTS, dtype=torch.cfloat)  # AWGN
    return torch.view_as_real(sig).flatten(), freq / 2e4


torch.manual_seed(0)
signals, offsets = [], []
for i in range(args.samples):
    signal, offset = generate_iq_sample()
    signals.append(signal)
    offsets.append(offset)
dataset = torch.stack(signals), torch.stack(offsets)
print(f"generation_loop: {len(signals)} samples of {NUM_POINTS} points")
