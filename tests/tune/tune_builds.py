"""Small build functions for tune's tests: each a real model a test can train in milliseconds."""

from __future__ import annotations

import torch
from torch import nn


def mlp(batch_size: int) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    return dict(
        model=model,
        inputs=torch.randn(batch_size, 32),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
    )


def conv2d(batch_size: int) -> dict:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1))
    return dict(
        model=model, inputs=torch.randn(batch_size, 3, 16, 16), optimizer=lambda p: torch.optim.Adam(p)
    )


class _Deep3d(nn.Conv3d):
    """A subclass of Conv3d: detection must not depend on the exact class."""


def conv3d(batch_size: int) -> dict:
    model = nn.Sequential(_Deep3d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 1, 1))
    return dict(
        model=model, inputs=torch.randn(batch_size, 2, 8, 8, 8), optimizer=lambda p: torch.optim.Adam(p)
    )


def pairwise(batch_size: int) -> dict:
    """Every sample is compared with every other one (a B×B×D tensor): the work per sample grows
    with the batch, so past the first few rungs a smaller batch trains more samples per second."""
    torch.manual_seed(0)
    model = nn.Linear(256, 256)
    x = torch.randn(batch_size, 256)

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        gaps = out[:, None, :] - out[None, :, :]
        return gaps.square().mean()

    return dict(model=model, inputs=x, optimizer=lambda p: torch.optim.SGD(p, lr=0.01), loss_fn=loss_fn)


def pairwise_big(batch_size: int) -> dict:
    """Like ``pairwise`` with 16 KiB per pair: batch 64 alone needs 64 MiB of gaps."""
    model = nn.Linear(4096, 4096)
    x = torch.randn(batch_size, 4096)

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return (out[:, None, :] - out[None, :, :]).square().mean()

    return dict(model=model, inputs=x, loss_fn=loss_fn)


def no_batch_axis(batch_size: int) -> dict:
    return dict(model=nn.Linear(8, 1), inputs=torch.randn(4, 8))


def broken(batch_size: int) -> dict:
    raise ValueError("the data folder is missing")


def nan_after_first(batch_size: int) -> dict:
    """Fine at batch 1, raises at any larger batch: one configuration failing is a row, not the end."""
    model = nn.Linear(8, 1)

    class Picky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 1 and not torch.compiler.is_compiling():
                raise RuntimeError(f"batch {x.shape[0]} is not supported by this layer")
            return self.inner(x)

    return dict(model=Picky(), inputs=torch.randn(batch_size, 8))


def no_optimizer(batch_size: int) -> dict:
    return dict(model=nn.Linear(8, 1), inputs=torch.randn(batch_size, 8))


def gpu_written(batch_size: int) -> dict:
    """Written for the GPU, the way ``trainmedic plan`` takes it: ``.cuda()``, ``.to("cuda")`` and a
    ``device="cuda"`` tensor made in the loss, every step."""
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).cuda()

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out, torch.zeros(out.shape[0], 1, device="cuda"))

    return dict(
        model=model,
        inputs=torch.randn(batch_size, 32).to("cuda"),
        loss_fn=loss_fn,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
    )


class _Deep(nn.Module):
    """One 512x512 layer applied 24 times: a step of a few seconds at batch 512 on a 2-core CPU,
    made of ops of a few tens of milliseconds each."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(512, 512, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(24):
            x = torch.tanh(self.layer(x))
        return x


def slow_step(batch_size: int) -> dict:
    torch.manual_seed(0)
    return dict(
        model=_Deep(), inputs=torch.randn(batch_size, 512), optimizer=lambda p: torch.optim.SGD(p, lr=1e-4)
    )
