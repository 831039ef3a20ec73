"""Healthy: seed 003's table served by `trainmedic.data.load`, so the step is the model's own work.

The "after" of `data_database.py`: the same SQLite layout (float32 receiver features in a BLOB,
lat/lon targets) is read once by ``data.load("sqlite:///...", query=..., schema=...)`` into the
RAM tier, and every batch is one gather. The diagnosis must call it ``compute`` at the model's
forward, with the data share small (``max_share``), and count the loader's batches as steps
only where no optimizer step marks them (here the optimizer does).
"""

EXPECT = {"bottleneck": "compute", "kind": "", "max_share": {"data": 0.2}}

import argparse
import os
import sqlite3
import tempfile

import numpy as np
import torch
from torch import nn

from trainmedic import data

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

NUM_ROWS, RECEIVERS, FEATURES, HIDDEN, BATCH = 8_192, 7, 64, 1024, 256


def build_database(path: str) -> None:
    rng = np.random.default_rng(0)
    feats = rng.standard_normal(size=(NUM_ROWS, RECEIVERS * FEATURES), dtype=np.float32)
    latlon = rng.uniform(-1.0, 1.0, size=(NUM_ROWS, 2))
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, split TEXT, features BLOB, lat REAL, lon REAL)")
        conn.executemany("INSERT INTO measurements VALUES (?, ?, ?, ?, ?)",
                         ((i, "val" if i % 10 == 0 else "train", feats[i].tobytes(), latlon[i, 0], latlon[i, 1])
                          for i in range(NUM_ROWS)))
    conn.close()


class Triangulator(nn.Module):
    """Receiver features -> (lat, lon), wide enough that its matmuls are the step."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(RECEIVERS * FEATURES, HIDDEN), nn.ReLU(),
                                  nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.head = nn.Linear(HIDDEN, 2)

    def forward(self, x):
        return self.head(self.body(x))


torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    db_path = os.path.join(tmp, "heimdall.sqlite")
    build_database(db_path)
    loader = data.load(f"sqlite:///{db_path}", query="SELECT features, lat, lon FROM measurements WHERE split = 'train'",
                       schema={"features": ("float32", (RECEIVERS * FEATURES,))}, batch_size=BATCH, progress=False,
                       cache_dir=tmp)
    model = Triangulator()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    while step < args.steps:
        for features, lat, lon in loader:
            target = torch.stack([lat, lon], dim=1).float()
            loss = nn.functional.mse_loss(model(features), target)
            optimizer.zero_grad()
            loss.backward()  # expect-where
            optimizer.step()
            step += 1
            if step == args.steps:
                break
    print(f"trainmedic_data: {args.steps} steps on tier {loader.tier}, final loss {loss.item():.4f}")
