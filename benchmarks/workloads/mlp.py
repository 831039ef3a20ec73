"""A compute-bound workload: a wide MLP, where each weight is reused by every sample of the batch.

Its arithmetic intensity grows with the batch (a d×d matmul does 2·B·d² FLOPs on d² weights and
2·B·d activations), so past a few dozen samples it sits right of the ridge on any device: the
opposite case to the 3D U-Net of unet3d.py.

    trainmedic tune benchmarks/workloads/mlp.py:build --device cpu
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 1024
HIDDEN = 1024
LAYERS = 3


def build(batch_size: int) -> dict:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    width = FEATURES
    for _ in range(LAYERS):
        layers += [nn.Linear(width, HIDDEN), nn.ReLU()]
        width = HIDDEN
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    x = torch.randn(batch_size, FEATURES)
    y = torch.randint(0, 10, (batch_size,))
    return dict(
        model=model,
        inputs=x,
        optimizer=lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9),
        loss_fn=lambda out: nn.functional.cross_entropy(out, y.to(out.device)),
    )
