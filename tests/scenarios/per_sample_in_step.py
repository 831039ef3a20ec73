"""Tiny-ops-bound inside the step: each batch built by a per-sample loop, then a real training step.

Reproduces seed 001's pattern where it does the most harm to a diagnosis: the per-sample loop
(``make_sample()``, ~20 small tensor calls per sample: a random chirp, a windowed echo,
normalisation, noise and a one-hot label) runs inside the training step, 64 samples per batch,
and the step also does a real forward, backward and Adam update on an MLP. The loop is the
bottleneck, but only part of the step: the backward and the optimizer are not the loop's and
vectorising the loop does not remove them.
Measured truth (ablation: ``--batched`` builds the same batch with one batched call of the same
maths; shared 2-core dev VM under load, torch 2.13 CPU, one thread, ten alternating pairs): the
per-sample loop is ~62 % of the step (median step 16-33 ms), the batched step 7.5-15 ms;
vectorising the loop buys 1.9-2.75x (median 2.1x): the backward and Adam stay. How large the
loop's share is depends on the CPU's cost per call, so tests take the truth from ``--ablate``
(both builds in alternating steps of one process) on the machine they run on.
Fix: ``batch.vectorize(make_sample)`` over [batch, ...] tensors (as ``make_batch_vectorized()``
does by hand).
"""

EXPECT = {"bottleneck": "tiny_ops", "kind": ""}

import argparse
import math

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batched", action="store_true", help="ablation: build the batch with one batched call")
parser.add_argument(
    "--ablate", action="store_true", help="alternate per-sample and batched steps; print each one's median step"
)
args, _ = parser.parse_known_args()

BATCH, POINTS, CLASSES = 64, 256, 8
T = torch.linspace(0, 1, POINTS)
BASE_PHASE, CHIRP = 2 * math.pi * 5.0 * T, 2 * math.pi * T * T
WINDOW = torch.hann_window(POINTS)
RATES = 20.0 + 3.0 * torch.arange(CLASSES)  # chirp rate per class


def make_sample():  # expect-where
    label = torch.randint(0, CLASSES, ())
    rate = RATES[label] + 5.0 * torch.rand(())  # the class's chirp rate, blurred
    sig = torch.sin(BASE_PHASE + rate * CHIRP)
    sig = sig + 0.5 * torch.roll(sig, 7) * WINDOW  # a windowed echo
    sig = (sig - sig.mean()) / (sig.std() + 1e-6)
    sig = sig + 0.5 * torch.randn(POINTS)
    return sig, nn.functional.one_hot(label, CLASSES).float()


def make_batch():
    xs, ys = [], []
    for _ in range(BATCH):
        x, y = make_sample()
        xs.append(x)
        ys.append(y)
    return torch.stack(xs), torch.stack(ys)


def make_batch_vectorized():
    """The same maths over [BATCH, POINTS] tensors: the ablation's batch."""
    label = torch.randint(0, CLASSES, (BATCH, 1))
    rate = RATES[label] + 5.0 * torch.rand(BATCH, 1)
    sig = torch.sin(BASE_PHASE + rate * CHIRP)
    sig = sig + 0.5 * torch.roll(sig, 7, dims=1) * WINDOW
    sig = (sig - sig.mean(1, keepdim=True)) / (sig.std(1, keepdim=True) + 1e-6)
    sig = sig + 0.5 * torch.randn(BATCH, POINTS)
    return sig, nn.functional.one_hot(label[:, 0], CLASSES).float()


class Classifier(nn.Module):
    def __init__(self, hidden: int = 512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(POINTS, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, CLASSES),
        )

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if args.ablate:
    # The truth on this machine, now: both builds timed in alternating steps of one process, so
    # a busy neighbour slows both alike.
    import statistics
    import time

    times = {False: [], True: []}
    for step in range(2 * args.steps):
        batched = bool(step % 2)
        start = time.perf_counter()
        x, y = make_batch_vectorized() if batched else make_batch()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times[batched].append(time.perf_counter() - start)
    per_sample, whole = (statistics.median(times[b][2:]) for b in (False, True))
    print(f"ablation: per-sample step {per_sample * 1e3:.2f} ms, batched step {whole * 1e3:.2f} ms")
    raise SystemExit(0)

for _step in range(args.steps):
    x, y = make_batch_vectorized() if args.batched else make_batch()
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"per_sample_in_step: {args.steps} steps, final loss {loss.item():.4f}")
