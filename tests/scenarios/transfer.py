"""GPU-only, transfer-bound: a big pageable float32 batch is copied host->device every step.

The mistake behind the "preload to VRAM" fix in seed 003 (and the RAM-cache fix in seed 000):
the data set was decoded and normalised once into one float32 CPU tensor -- in ordinary
pageable memory -- and every step slices a batch from it and ``.to(device, non_blocking=True)``.
Without ``pin_memory()`` the copy is staged through a bounce buffer and is synchronous anyway,
and shipping float32 (4x the bytes of the uint8 pixels) makes it as slow as possible, while the
small model needs a fraction of that time on the GPU. Fix: keep the data on the GPU (seed 003),
or store uint8 in pinned memory and convert on the device.

On a CPU-only machine ``.to("cpu")`` is a no-op; the script still runs (smaller batches) but
there is no transfer to measure.
"""

EXPECT = {"bottleneck": "transfer", "kind": "", "gpu_only": True}

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH = 512 if device == "cuda" else 16  # 512 x 3 x 128 x 128 float32 = 100 MB per step on a GPU
NUM_BATCHES, CLASSES = 3, 10

torch.manual_seed(0)
# "Preprocessed once at start-up": normalised float32 images in ordinary (pageable) host memory.
images = torch.rand(NUM_BATCHES * BATCH, 3, 128, 128).sub_(0.5).div_(0.25)
labels = torch.randint(0, CLASSES, (NUM_BATCHES * BATCH,))

model = nn.Sequential(nn.Conv2d(3, 16, 4, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 4, stride=4), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(args.steps):
    i = (step % NUM_BATCHES) * BATCH
    x = images[i:i + BATCH].to(device, non_blocking=True)  # expect-where
    y = labels[i:i + BATCH].to(device, non_blocking=True)
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"transfer ({device}): {args.steps} steps, final loss {loss.item():.4f}")
