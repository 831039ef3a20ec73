"""A training loop under Hugging Face accelerate (``cpu=True``), as its docs write it: an MLP on a
DataLoader; the wild corpus's accelerate case (benchmarks/wild.py)."""

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    x = torch.randn(150 * 64, 256)
    y = x[:, :10].argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y)
        accelerator.backward(loss)
        optimizer.step()


if __name__ == "__main__":
    main()
