"""A small classifier whose every batch is read from a gzip-compressed HDF5 file.

The example of the `trainmedic run` and `trainmedic attach` pages: the batch read is most of
the step, and the report says so at its line.
"""

import argparse
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)

path = Path("signals.h5")
if not path.exists():  # 4,096 samples of 14 x 128 x 2 float32, stored in small gzip chunks
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=4096)
    signals = (rng.normal(size=(4096, 14, 128, 2)) + labels[:, None, None, None]).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=signals, chunks=(8, 14, 128, 2), compression="gzip")
        f.create_dataset("y", data=labels)

model = nn.Sequential(nn.Flatten(), nn.Linear(14 * 128 * 2, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
print(f"training: {args.steps} steps of batch {args.batch_size}", flush=True)

with h5py.File(path, "r") as f:
    n = f["x"].shape[0]
    for step in range(args.steps):
        idx = np.sort(np.random.choice(n, args.batch_size, replace=False))
        x = torch.from_numpy(f["x"][idx])
        y = torch.from_numpy(f["y"][idx])
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print(f"final loss {loss.item():.3f}")
