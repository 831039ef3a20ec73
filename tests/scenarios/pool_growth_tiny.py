"""Data-bound, growing, with a per-row draw: a replay pool re-concatenated every step, then sampled row by row.

Reproduces seed 004's mistake #2 in the form a self-training / replay loop takes: every step the
model's (detached) outputs on its training batch are appended to a Python list, and the
next batch is drawn by ``torch.cat``-ing the *whole* list -- which grows every step, so the copy
and the step time grow with it -- and then picking rows one at a time (``pool[i]`` plus a small
per-row jitter, a few hundred small tensor calls). The per-row draw is a fixed cost and looks
like a tiny-ops loop; the re-concatenation is what dominates and what grows.
Fix: keep a preallocated buffer (or concatenate once) and draw the batch with one index
``pool[idx]``.
"""

EXPECT = {"bottleneck": "data", "kind": "pool", "growth": True}

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

DIM, INITIAL_CHUNKS, BATCH = 2048, 2, 256


class ReplayPool:
    def __init__(self):
        self.chunks: list[torch.Tensor] = []

    def push(self, states: torch.Tensor) -> None:
        self.chunks.append(states)

    def draw(self, batch_size: int) -> torch.Tensor:
        pool = torch.cat(self.chunks, dim=0)  # expect-where
        rows = torch.randint(0, pool.shape[0], (batch_size,)).tolist()
        picked = []
        for i in rows:  # a loop, not a comprehension: one function on every Python, as 3.12 inlines it
            picked.append(pool[i] + 0.01 * torch.randn(DIM))
        return torch.stack(picked)


class Dynamics(nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(DIM, hidden), nn.Tanh(), nn.Linear(hidden, DIM))

    def forward(self, x):
        return x + 0.1 * self.net(x)


torch.manual_seed(0)
model = Dynamics()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
replay = ReplayPool()
for _ in range(INITIAL_CHUNKS):
    replay.push(torch.randn(BATCH, DIM))
for _step in range(args.steps):
    x = replay.draw(BATCH)
    out = model(x)
    loss = (out - x.roll(1, dims=1)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    replay.push(out.detach())  # this step's outputs join the pool
print(
    f"pool_growth_tiny: {args.steps} steps, pool size {sum(len(c) for c in replay.chunks)}, final loss {loss.item():.4f}"
)
