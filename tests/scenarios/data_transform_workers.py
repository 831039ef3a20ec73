"""Data-bound in the DataLoader's worker: a heavy per-item transform with num_workers=1.

pytorch/examples' pattern on a GPU machine (``num_workers=1, pin_memory=True``): the dataset's
``__getitem__`` applies a transform function of the script's own, here a 5x5 blur written in
NumPy and repeated a few times per image, and the one worker cannot make batches as fast as the
step uses them. The transform runs in the worker process, which a sampler in the training
process never sees: the loop only waits in the loader's ``next()``. The verdict must still name
``augment``, where the worker's time goes (fetched again in the training process after the run),
and say that the worker cannot keep up. Fix: more workers, or a cheaper, batched transform.
"""

EXPECT = {"bottleneck": "data", "kind": "loader"}

import argparse

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)  # stable timings on a small machine

IMAGES, SIZE, CLASSES, PASSES = 2048, 48, 10, 3
KERNEL = np.full((5, 5), 1 / 25, dtype=np.float32)


def augment(img):  # expect-where
    out = img.astype(np.float32) / 255.0
    for _ in range(PASSES):
        padded = np.pad(out, 2, mode="reflect")
        out = np.einsum("hwij,ij->hw", sliding_window_view(padded, (5, 5)), KERNEL)
    return torch.from_numpy((out - out.mean()) / (out.std() + 1e-6))[None]


class Images(Dataset):
    def __init__(self, transform):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(IMAGES, SIZE, SIZE), dtype=np.uint8)
        self.labels = rng.integers(0, CLASSES, size=IMAGES)
        self.transform = transform

    def __len__(self):
        return IMAGES

    def __getitem__(self, i):
        return self.transform(self.images[i]), int(self.labels[i])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args, _ = parser.parse_known_args()
    torch.manual_seed(0)
    loader = DataLoader(Images(augment), batch_size=16, shuffle=True, num_workers=1, drop_last=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(SIZE * SIZE, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step == args.steps:
            break
    print(f"data_transform_workers: {args.steps} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
