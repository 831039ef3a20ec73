"""Data-bound: every batch is fancy-indexed out of a gzip-compressed HDF5 file.

Reproduces seed 000 (AI-RAN neural receiver, Issue #5, "GPU idle during training"): the
generator kept the HDF5 file open and did ``f['y_received'][batch_indices]`` (indices sorted,
because h5py only accepts increasing fancy indices) for every batch, so each step waited on
chunk reads + gzip decompression while the accelerator sat idle (37 s/step -> 0.46 s/step once
the arrays were loaded into RAM with ``f['y_received'][:]`` at start-up).

The model here (a tiny per-resource-element MLP "neural receiver") is deliberately cheap, so
the step is dominated by the HDF5 read.
"""

EXPECT = {"bottleneck": "data", "kind": "hdf5", "suggests": '/pusch_dataset.h5", fields=["y_received", "bits"], batch_size=64)'}

import argparse
import os
import tempfile

import h5py
import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=32)
args, _ = parser.parse_known_args()

NUM_SAMPLES, SYMBOLS, SUBCARRIERS = 1024, 14, 128  # one slot: 14 OFDM symbols x 128 subcarriers


def write_dataset(path: str) -> None:
    """Simulate received QPSK slots and store them the way the simulator did: gzip, small chunks."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, size=(NUM_SAMPLES, SYMBOLS, SUBCARRIERS, 2), dtype=np.uint8)
    y = (1.0 - 2.0 * bits) * 0.7 + rng.normal(0.0, 0.3, size=bits.shape)
    with h5py.File(path, "w") as f:
        f.create_dataset("y_received", data=y.astype(np.float32), chunks=(8, SYMBOLS, SUBCARRIERS, 2),
                         compression="gzip", compression_opts=1, shuffle=True)
        f.create_dataset("bits", data=bits)


class PUSCHDataset:
    """The original loader: streams batches straight from the HDF5 file (no RAM cache)."""

    def __init__(self, h5_path: str, batch_size: int = 64):
        self.h5_path = h5_path
        self.batch_size = batch_size
        with h5py.File(h5_path, "r") as f:
            self.num_samples = f["y_received"].shape[0]

    def _generator(self, indices):
        with h5py.File(self.h5_path, "r") as f:
            np.random.shuffle(indices)  # shuffle for training ...
            for i in range(len(indices) // self.batch_size):
                batch_indices = np.sort(indices[i * self.batch_size:(i + 1) * self.batch_size])  # ... sorted for h5py
                y = f["y_received"][batch_indices]  # expect-where
                bits = f["bits"][batch_indices]
                yield torch.from_numpy(y), torch.from_numpy(bits).float()

    def batches(self):
        while True:  # one pass over the file per epoch, forever
            yield from self._generator(np.arange(self.num_samples))


class NeuralReceiver(nn.Module):
    """Per-resource-element demapper: 2 IQ values -> 2 bit logits. Cheap on purpose."""

    def __init__(self, hidden: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, y):
        return self.net(y)


np.random.seed(0)
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    h5_path = os.path.join(tmp, "pusch_dataset.h5")
    write_dataset(h5_path)
    data = PUSCHDataset(h5_path).batches()
    model = NeuralReceiver()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    for step in range(args.steps):
        y, bits = next(data)
        loss = loss_fn(model(y), bits)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"data_hdf5: {args.steps} steps, final loss {loss.item():.4f}")
