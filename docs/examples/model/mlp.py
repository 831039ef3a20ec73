"""A multilayer perceptron, small enough for `trainmedic tune` to measure on a laptop CPU in
seconds."""

import torch
from torch import nn


def build(batch_size):
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    inputs = torch.randn(batch_size, 512)
    labels = torch.randint(0, 10, (batch_size,))
    return dict(
        model=model,
        inputs=inputs,
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        loss_fn=lambda logits: nn.functional.cross_entropy(logits, labels),
    )
