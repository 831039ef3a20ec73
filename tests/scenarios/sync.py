"""GPU-only, sync-bound: `loss.item()` after every micro-batch drains the GPU queue.

The "print the loss every batch" habit (seed 002, optimisation #5, where per-batch printing
was cut to once per epoch) inside a gradient-accumulation loop: after each micro-batch the
trainer reads ``loss.item()`` to keep a running loss for the progress line. Every ``.item()``
blocks the host until the GPU has executed everything queued so far, so the next micro-batch's
many small kernel launches (a deep, narrow residual MLP) start into an empty queue and the GPU
idles while Python issues them. Fix: accumulate on the device (``running += loss.detach()``)
and read it once every N steps.

On a CPU-only machine ``.item()`` costs nothing; the script still runs (smaller micro-batches)
but there is no device to wait for.
"""

EXPECT = {"bottleneck": "sync", "kind": "", "gpu_only": True}

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH, DEPTH, ACCUMULATION, CLASSES = 256, 12, 8, 10
MICRO_BATCH = 1024 if device == "cuda" else 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return x + nn.functional.gelu(self.fc(self.norm(x)))


torch.manual_seed(0)
X = torch.randn(32 * MICRO_BATCH, WIDTH, device=device)
Y = (X[:, :CLASSES] + 0.5 * torch.randn(len(X), CLASSES, device=device)).argmax(1)
model = nn.Sequential(*[Block() for _ in range(DEPTH)], nn.Linear(WIDTH, CLASSES)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
for step in range(args.steps):
    optimizer.zero_grad()
    running_loss = 0.0
    for micro in range(ACCUMULATION):
        idx = torch.randint(0, len(X), (MICRO_BATCH,), device=device)
        loss = nn.functional.cross_entropy(model(X[idx]), Y[idx]) / ACCUMULATION
        loss.backward()
        running_loss += loss.item()  # expect-where
    optimizer.step()
print(f"sync ({device}): {args.steps} steps, final loss {running_loss:.4f}")
