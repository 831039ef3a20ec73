"""Tiny-ops-bound with no training step and no function: per-sample generation at module level.

Reproduces seed 001's generation job as a notebook-turned-script would write it: the body of the
per-sample generator is pasted straight into a module-level ``for`` loop -- no ``def``, no model,
no optimizer, no DataLoader. Each iteration synthesises one short IQ snapshot with ~20 small
torch calls (a random carrier, a delayed echo via ``torch.roll``, a complex fading gain, power
normalisation, additive noise), appends it to a list, and the lists are stacked at the end. The
per-call dispatch overhead, not the arithmetic, is the cost, exactly as in ``generation_loop.py``;
what changes is the advice: there is no per-sample function to hand to ``batch.vectorize``,
and the line to name is the loop itself (its whole body moves into a function).
Fix: move the loop body into a function of one sample, then ``batch.vectorize`` it (or
``batch.generate`` the whole job) over [batch, ...] tensors.
"""

EXPECT = {"bottleneck": "tiny_ops", "kind": "per-sample loop", "fixes": "into a function", "loop": "for _ in range(args.samples):"}

import argparse
import math

import torch

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=6000)
args, _ = parser.parse_known_args()

NUM_POINTS, SAMPLE_RATE = 64, 1e6
ECHO_DELAYS = (3,)  # one multipath echo, 3 samples late
OMEGA_T = 2 * math.pi * torch.arange(NUM_POINTS) / SAMPLE_RATE
ONES = torch.ones(NUM_POINTS)

torch.manual_seed(0)
snapshots, labels = [], []
for _ in range(args.samples):  # expect-where
    offset_hz = torch.empty(()).uniform_(-3e4, 3e4)  # carrier offset, the label
    iq = torch.polar(ONES, OMEGA_T * offset_hz + 2 * math.pi * torch.rand(()))
    for d in ECHO_DELAYS:  # multipath
        iq = iq + 0.25 * torch.rand(()) * torch.roll(iq, d)
    iq = iq * torch.randn((), dtype=torch.cfloat)  # flat fading
    iq = iq * (NUM_POINTS**0.5 / torch.linalg.vector_norm(iq))  # normalise power
    iq = iq + 0.05 * torch.randn(NUM_POINTS, dtype=torch.cfloat)  # AWGN
    snapshots.append(torch.view_as_real(iq).reshape(-1))
    labels.append(offset_hz / 3e4)
dataset = torch.stack(snapshots), torch.stack(labels)
print(f"generation_module_level: {len(snapshots)} samples of {NUM_POINTS} points")
