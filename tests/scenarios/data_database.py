"""Data-bound: one SQL round trip per batch, `WHERE sample_id IN (...)` on an unindexed column.

Reproduces seed 003 (Heimdall triangulation training, "database I/O bottleneck"): the
TriangulationDataset opened a fresh DB session for every batch and queried PostgreSQL for it,
so the GPU sat at 8-30 % utilisation waiting 200-500 ms per batch. Here the database is SQLite
(stdlib), the receiver features are float32 BLOBs decoded with ``np.frombuffer``, and the
sampler's ids are looked up on ``sample_id``, which (as so often) has no index: every batch is a
full table scan. (A seeded sampler + ``IN (...)`` keeps the run deterministic; an
``ORDER BY RANDOM() LIMIT n`` query also scans the whole table but cannot be seeded.)
Fix: load the split into memory once (one query at start-up) and index tensors per batch.
"""

EXPECT = {"bottleneck": "data", "kind": "database", "suggests": """query="SELECT features, lat, lon FROM measurements WHERE split = 'train'", schema={"features": ("float32", (448,))}, batch_size=256)"""}

import argparse
import os
import sqlite3
import tempfile

import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

NUM_ROWS, RECEIVERS, FEATURES = 44_000, 7, 64  # 7 WebSDR receivers x 64 features per sample


def build_database(path: str) -> None:
    rng = np.random.default_rng(0)
    feats = rng.standard_normal(size=(NUM_ROWS, RECEIVERS * FEATURES), dtype=np.float32)
    latlon = rng.uniform(-1.0, 1.0, size=(NUM_ROWS, 2))
    with sqlite3.connect(path) as conn:
        # sample_id is what the training code looks rows up by -- and nobody indexed it
        conn.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, sample_id INTEGER, split TEXT,"
                     " features BLOB, lat REAL, lon REAL)")
        conn.executemany("INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?)",
                         ((i, 100_000 + i, "val" if i % 10 == 0 else "train", feats[i].tobytes(),
                           latlon[i, 0], latlon[i, 1]) for i in range(NUM_ROWS)))
    conn.close()


class TriangulationDataset:
    """Fetches every batch from the database, like the original PostgreSQL-backed dataset."""

    def __init__(self, db_path: str, split: str = "train", batch_size: int = 256, seed: int = 0):
        self.db_path, self.batch_size = db_path, batch_size
        self.rng = np.random.default_rng(seed)
        conn = sqlite3.connect(db_path)  # only the ids are listed up front
        rows = conn.execute("SELECT sample_id FROM measurements WHERE split = ?", (split,)).fetchall()
        conn.close()
        self.sample_ids = np.array([r[0] for r in rows])

    def _get_db_session(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path)  # a new connection per batch, as in the original

    def next_batch(self):
        ids = [int(i) for i in self.rng.choice(self.sample_ids, self.batch_size, replace=False)]
        query = f"SELECT features, lat, lon FROM measurements WHERE sample_id IN ({','.join('?' * len(ids))})"
        conn = self._get_db_session()
        try:
            rows = conn.execute(query, ids).fetchall()  # expect-where
        finally:
            conn.close()
        features = np.stack([np.frombuffer(r[0], dtype=np.float32) for r in rows])
        targets = np.array([(r[1], r[2]) for r in rows], dtype=np.float32)
        return torch.from_numpy(features), torch.from_numpy(targets)


class Triangulator(nn.Module):
    """Receiver features -> (lat, lon). Small on purpose: the database is the bottleneck."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(RECEIVERS * FEATURES, 128), nn.ReLU(),
                                 nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    db_path = os.path.join(tmp, "heimdall.sqlite")
    build_database(db_path)
    dataset = TriangulationDataset(db_path)
    model = Triangulator()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x, target = dataset.next_batch()
        loss = nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"data_database: {args.steps} steps, final loss {loss.item():.4f}")
