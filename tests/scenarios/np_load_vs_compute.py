"""Data-bound by a nose: every step re-reads the whole training array from a ``.npy`` file.

Reproduces the "load inside the loop" mistake of small research scripts (seed 000's RAM-cache
lesson, in its simplest form): the features were saved once with ``np.save``, and the training
loop calls ``np.load`` on the file at the top of every step -- reading and allocating 50 MB --
only to gather one random batch of 256 rows from it. The model (an MLP, Adam) is a little more
than half of the step, so compute's share is the larger one; but the load is pure waste that a
one-line fix removes, while compute can only be tuned. The findings must be ranked by what
their fix buys (the data finding first), not by share.
Measured (shared 2-core dev VM, torch 2.13 CPU, one thread, three runs): median step 27-32 ms;
the ``np.load`` line 45-46 % of it, the rest of the batch 2 %, forward + backward + Adam 52-53 %.
Fix: load the array once before the loop (or ``data.load(".../features.npy")`` into the RAM
tier) and gather each batch from memory.
"""

EXPECT = {"bottleneck": "data", "kind": "disk"}

import argparse
import os
import tempfile

import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

ROWS, FEATURES, CLASSES, BATCH = 24576, 512, 10, 256


class Net(nn.Module):
    def __init__(self, hidden: int = 1024):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES))

    def forward(self, x):
        return self.net(x)


rng = np.random.default_rng(0)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "features.npy")
    np.save(path, rng.standard_normal((ROWS, FEATURES), dtype=np.float32))
    labels = torch.from_numpy(rng.integers(0, CLASSES, size=ROWS))

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _step in range(args.steps):
        features = np.load(path)  # expect-where
        idx = rng.integers(0, ROWS, size=BATCH)
        x, y = torch.from_numpy(features[idx]), labels[idx]
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print(f"np_load_vs_compute: {args.steps} steps, final loss {loss.item():.4f}")
