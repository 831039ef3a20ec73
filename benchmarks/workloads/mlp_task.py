"""The healthy training task that ``step_bound.py`` and ``attach_target.py`` time: a small MLP
trained with Adam on pre-stacked data (a step's data cost is one gather), fixed seed."""

from __future__ import annotations

import torch
from torch import nn

NUM_SAMPLES, FEATURES, CLASSES = 8192, 512, 10


class MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(FEATURES, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def task(hidden: int) -> tuple[torch.Tensor, torch.Tensor, MLP, torch.optim.Optimizer]:
    """The data (pre-stacked once), the model and its optimizer, from seed 0."""
    torch.manual_seed(0)
    x = torch.randn(NUM_SAMPLES, FEATURES)
    y = (x[:, :CLASSES] * torch.linspace(1.0, 2.0, CLASSES)).argmax(1)
    model = MLP(hidden)
    return x, y, model, torch.optim.Adam(model.parameters(), lr=1e-3)
