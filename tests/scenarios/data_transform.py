"""Data-bound: heavy per-sample numpy augmentation in `Dataset.__getitem__`, num_workers=0.

The classic "the GPU is starving" story (seeds 000 and 003 are the I/O versions of it): every
sample gets a random crop, flip, colour jitter, a Gaussian blur written in numpy (a 5x5 window
view + einsum, i.e. a convolution done on the CPU, one image at a time) and normalisation,
all inside ``__getitem__``, served by a DataLoader with ``num_workers=0`` -- so the training
loop waits for the main process to augment every batch. Fix: move the blur (and friends) to
batched tensor ops / the GPU, or at least use ``num_workers > 0``.
"""

EXPECT = {"bottleneck": "data", "kind": "transform"}

import argparse
import os
import tempfile

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=32)
args, _ = parser.parse_known_args()

NUM_IMAGES, STORED, CROP, CLASSES = 512, 72, 64, 10
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def gaussian_kernel(size: int = 5, sigma: float = 1.0) -> np.ndarray:
    g = np.exp(-0.5 * ((np.arange(size) - size // 2) / sigma) ** 2)
    k = np.outer(g, g)
    return (k / k.sum()).astype(np.float32)


class AugmentedImages(Dataset):
    def __init__(self, path: str, seed: int = 0):
        self.images = np.load(path, mmap_mode="r")  # decoded uint8 HWC images
        self.labels = (self.images[:, ::8, ::8].mean(axis=(1, 2, 3)) // 13 % CLASSES).astype(np.int64)
        self.kernel = gaussian_kernel()
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        top, left = self.rng.integers(0, STORED - CROP + 1, size=2)
        img = self.images[i, top:top + CROP, left:left + CROP].astype(np.float32) / 255.0  # random crop
        if self.rng.random() < 0.5:
            img = img[:, ::-1]  # horizontal flip
        img = np.clip(img * self.rng.uniform(0.8, 1.2) + self.rng.uniform(-0.1, 0.1), 0.0, 1.0)  # jitter
        padded = np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="reflect")
        img = np.einsum("hwcij,ij->hwc", sliding_window_view(padded, (5, 5), axis=(0, 1)), self.kernel)  # expect-where
        img = (img - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), self.labels[i]


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "images.npy")
    rng = np.random.default_rng(0)
    np.save(path, rng.integers(0, 256, size=(NUM_IMAGES, STORED, STORED, 3), dtype=np.uint8))
    loader = DataLoader(AugmentedImages(path), batch_size=32, shuffle=True, num_workers=0, drop_last=True,
                        generator=torch.Generator().manual_seed(0))
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
    print(f"data_transform: {args.steps} steps, final loss {loss.item():.4f}")
