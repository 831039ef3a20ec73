"""Data-bound, growing: the whole trajectory pool is re-concatenated on every training step.

Reproduces seed 004, mistake #2 (NSGF++ reproduction, "TrajectoryPool re-concatenation every
step"): the pool was a Python list of tensors and ``sample()`` did ``torch.cat(self.x_pool,
dim=0)`` over all of it each step -- ~0.5 s/step of copying against ~0.05 s of forward/backward.
Here the pool also keeps growing (every step pushes a freshly simulated chunk of flow
trajectories), so the copy -- and the step time -- grows linearly over the run.
Fix: concatenate once (``finalize()``) or keep a preallocated buffer, and index into it.
"""

EXPECT = {"bottleneck": "data", "kind": "pool", "growth": True}

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

DIM, CHUNK, INITIAL_CHUNKS, BATCH = 28 * 28, 320, 16, 128  # flattened 28x28 images


class TrajectoryPool:
    """(x_t, v_t) pairs along straight source->target paths, stored as a list of chunks."""

    def __init__(self, targets: torch.Tensor):
        self.targets = targets
        self.x_pool: list[torch.Tensor] = []

    @torch.no_grad()
    def add_chunk(self, n: int = CHUNK) -> None:
        x0 = torch.randn(n, DIM)
        x1 = self.targets[torch.randint(0, len(self.targets), (n,))]
        t = torch.rand(n, 1)
        self.x_pool.append(torch.stack(((1 - t) * x0 + t * x1, x1 - x0), dim=1))

    def sample(self, batch_size: int):
        pool = torch.cat(self.x_pool, dim=0)  # expect-where
        idx = torch.randint(0, pool.shape[0], (batch_size,))
        batch = pool[idx]
        return batch[:, 0], batch[:, 1]


class VelocityField(nn.Module):
    def __init__(self, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(DIM, hidden), nn.SiLU(), nn.Linear(hidden, DIM))

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
targets = torch.rand(2048, DIM).round()  # stand-in for binarised MNIST digits
pool = TrajectoryPool(targets)
for _ in range(INITIAL_CHUNKS):  # pool-building phase
    pool.add_chunk()
model = VelocityField()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(args.steps):
    x_t, v_target = pool.sample(BATCH)
    loss = nn.functional.mse_loss(model(x_t), v_target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    pool.add_chunk()  # keep refreshing the pool with new trajectories
print(f"pool_growth: {args.steps} steps, pool size {sum(len(c) for c in pool.x_pool)}, final loss {loss.item():.4f}")
