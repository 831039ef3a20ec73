"""A GPU training script with three pitfalls `trainmedic lint` finds before anything runs."""

import h5py
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Signals(Dataset):
    def __init__(self, path):
        self.path = path
        with h5py.File(path, "r") as f:
            self.n = len(f["x"])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with h5py.File(self.path, "r") as f:
            return torch.from_numpy(f["x"][i]), int(f["y"][i])


def train(model, path, epochs=10):
    device = torch.device("cuda")
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Signals(path), batch_size=256, shuffle=True)
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
