"""A data-bound job: every step fancy-indexes its batch out of a gzip-compressed, chunked HDF5 file.

The model (a linear classifier over spectrogram frames) is cheap on purpose, so most of a step
waits on h5py finding the chunks that hold the batch's records and inflating them: ``trainmedic
attach`` should name ``data`` (kind ``hdf5``) at the read line, marked ``# expect-where``.
"""

import os
import tempfile

import h5py
import numpy as np
import torch
from jobctl import Job
from torch import nn

torch.set_num_threads(1)  # one core for the job, the other for the sampler

job = Job("data_bound")
RECORDS, FRAMES, BINS, CLASSES, BATCH = 1024, 32, 48, 6, 32


def write_spectrograms(path):
    """Spectrogram records stored the way a recorder writes them: gzip, a few records per chunk."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, CLASSES, size=RECORDS)
    tone = np.linspace(0.0, 1.0, BINS, dtype=np.float32)
    frames = rng.normal(0.0, 1.0, size=(RECORDS, FRAMES, BINS)).astype(np.float32)
    frames += (labels[:, None, None] / CLASSES) * tone  # a weak, learnable signal
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "frames", data=frames, chunks=(4, FRAMES, BINS), compression="gzip", compression_opts=1
        )
        f.create_dataset("labels", data=labels.astype(np.int64))


torch.manual_seed(0)
rng = np.random.default_rng(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(FRAMES * BINS, CLASSES))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
with tempfile.TemporaryDirectory(prefix="attach-job-") as folder:
    path = os.path.join(folder, "spectrograms.h5")
    write_spectrograms(path)
    with h5py.File(path, "r") as store:
        frames, labels = store["frames"], store["labels"][:]
        step = 0
        while job.running(step):
            # h5py takes only increasing indices, so each random batch is sorted first.
            idx = np.sort(rng.choice(RECORDS, size=BATCH, replace=False))
            x = torch.from_numpy(frames[idx])  # expect-where
            y = torch.from_numpy(labels[idx])
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
job.finish(steps=step, loss=f"{loss.item():.6f}")
