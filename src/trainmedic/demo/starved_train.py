"""A small classifier trained from an SQLite table, one query per batch.

Run it with --trainmedic-data for the fix: the same loop on batches that trainmedic.data serves
from RAM after one read of the table (--preload does the same by hand: one query, then batches
indexed in memory).
"""

import argparse
import itertools
import sqlite3

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--db", required=True)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch-size", type=int, default=256)
parser.add_argument("--preload", action="store_true")
parser.add_argument("--trainmedic-data", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
conn = sqlite3.connect(args.db)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def decode(rows):
    x = np.stack([np.frombuffer(features, dtype=np.float32) for features, _ in rows])
    y = np.array([label for _, label in rows])
    return torch.from_numpy(x), torch.from_numpy(y)


if args.trainmedic_data:
    from trainmedic import data

    loader = data.load(f"sqlite:///{args.db}", query="SELECT features, label FROM samples",
                       schema={"features": ("float32", (256,))}, batch_size=args.batch_size)
    batches = (batch for _ in itertools.count() for batch in loader)  # epoch after epoch, reshuffled

    def next_batch():
        return next(batches)
elif args.preload:
    X, Y = decode(conn.execute("SELECT features, label FROM samples").fetchall())
    generator = torch.Generator().manual_seed(0)

    def next_batch():
        idx = torch.randint(0, len(X), (args.batch_size,), generator=generator)
        return X[idx], Y[idx]
else:
    def next_batch():
        # A random batch straight from the database, every step.
        rows = conn.execute("SELECT features, label FROM samples ORDER BY RANDOM() LIMIT ?", (args.batch_size,)).fetchall()
        return decode(rows)


for _ in range(args.steps):
    x, y = next_batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f"final loss {loss.item():.3f}")
