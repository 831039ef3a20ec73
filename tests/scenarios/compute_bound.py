"""Healthy / compute-bound: the step is forward + backward + optimizer, nothing else.

This is the "after" picture of seeds 000, 002 and 003: the data set was loaded into memory
once and pre-stacked (seed 002, optimisation #4 "Pre-Stacked Data Arrays"), every batch is a
single index op, and logging happens once at the end. What is left is the model's own math: an
MLP with 1024x2048 matmuls, which is the time the diagnosis should call ``compute`` (healthy)
and point at the model's heaviest line: ``loss.backward()`` (~55 % of the step on a CPU).
"""

EXPECT = {"bottleneck": "compute", "kind": ""}

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

NUM_SAMPLES, FEATURES, HIDDEN, CLASSES, BATCH = 4096, 1024, 2048, 10, 192


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, FEATURES), nn.GELU())
        self.head = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        h = self.body(x)
        return self.head(h)


torch.manual_seed(0)
X = torch.randn(NUM_SAMPLES, FEATURES)  # pre-stacked once, like the fixed data loader
Y = (X[:, :CLASSES] * torch.linspace(1.0, 2.0, CLASSES)).argmax(1)
model = MLP()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
for step in range(args.steps):
    idx = torch.randint(0, NUM_SAMPLES, (BATCH,))
    x, y = X[idx], Y[idx]  # one gather per batch
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()  # expect-where
    optimizer.step()
print(f"compute_bound: {args.steps} steps, final loss {loss.item():.4f}")
