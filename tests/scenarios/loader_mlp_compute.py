"""Compute-bound, pytorch/examples-style: a DataLoader of per-item tensors feeding an MLP VAE.

Reproduces the shape of the small pytorch/examples trainers (the MNIST VAE, mnist_rnn): a
``def train(epoch)`` that iterates a ``torch.utils.data.DataLoader`` (batch 128,
``num_workers=0``) over a map-style Dataset; each ``__getitem__`` returns one image as a tensor
after a light per-item normalisation ``(x - mean) / std`` (the ``transforms.Normalize`` step),
and the default collate stacks 128 of them. The model is a 784-1024-20 encoder / 20-1024-784
decoder VAE trained with Adam on BCE + KL (the example's hidden layer is 400: there the loader's
share read 35-48 % on a 2-vCPU VM, a close call, not this scenario's clear one). The per-item
work is a few hundred small tensor calls per batch, but they are the loader's (data), not a
per-sample loop of the user's, and together they are a minor part of the step (12-25 %): the
forward, backward and Adam step dominate. Which of their lines is heaviest depends on the CPU:
backward (46 %, Adam 24 %) on a 2-vCPU AMD EPYC VM, Adam's step (48 %, backward 23 %) on a
16-core Xeon; the finding may point at either.
Fix: none needed.
"""

EXPECT = {"bottleneck": "compute", "kind": "", "max_share": {"tiny_ops": 0.05}, "or_at": ["optimizer.step()"]}

import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=128)
args, _ = parser.parse_known_args()

IMAGES, MEAN, STD = 2560, 0.1307, 0.3081  # a small synthetic stand-in for MNIST
HIDDEN = 1024


class SyntheticDigits(Dataset):
    """MNIST-like: uint8 28x28 images in memory, one normalised float tensor per item."""

    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        blobs = torch.rand(n, 1, 7, 7, generator=g) > 0.6
        self.images = (F.interpolate(blobs.float(), scale_factor=4) * 255).to(torch.uint8)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i].float() / 255
        return (x - MEAN) / STD, self.labels[i]


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, HIDDEN)
        self.fc21, self.fc22 = nn.Linear(HIDDEN, 20), nn.Linear(HIDDEN, 20)
        self.fc3 = nn.Linear(20, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, 784)

    def forward(self, x):
        h = F.relu(self.fc1(x.view(-1, 784)))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def loss_function(recon, x, mu, logvar):
    bce = F.binary_cross_entropy(recon, (x.view(-1, 784) * STD + MEAN).clamp(0, 1), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


torch.manual_seed(0)
train_loader = DataLoader(SyntheticDigits(IMAGES), batch_size=args.batch_size, shuffle=True, num_workers=0)
model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def train(epoch):
    model.train()
    train_loss = 0.0
    for data, _ in train_loader:
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()  # expect-where
        train_loss += loss.item()
        optimizer.step()
    return train_loss / len(train_loader.dataset)


for epoch in range(1, args.epochs + 1):
    avg = train(epoch)
print(f"loader_mlp_compute: {args.epochs} epochs, average loss {avg:.4f}")
