"""Models the planner has not been held to yet, for the next recording on a lent card.

Each ``build_*(batch_size)`` is a ``trainmedic plan`` build function; ``benchmarks/plan_gpu.py``
plans and records them beside the recorded set (tests/plan/gpu_truth), so that its errors on
kinds of model it was never fitted to are known:

- ``vit_sdpa``: a ViT-S/16-shaped encoder (6 layers, dim 384, 6 heads) on 224² images, attention
  through ``F.scaled_dot_product_attention``, meant for bf16;
- ``resnet_cl``: a ResNet of basic blocks with batch norm, model and images ``channels_last``;
- ``gru``: a two-layer GRU over 128 steps (cuDNN's RNN at an LSTM's measured rates, a guess);
- ``diffusion_unet``: a diffusion U-Net (GroupNorm, SiLU, time embedding, self-attention at the
  lowest resolution), predicting noise with an MSE loss, meant for bf16;
- ``dropout_mlp``: an MLP with dropout between its layers (CUDA's one-byte masks).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# The transformer block of the recorded set (its pre-norm block with SDPA), from benchmarks/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import plan_zoo

# -- ViT with SDPA ----------------------------------------------------------------------------


class _ViT(nn.Module):
    def __init__(
        self, dim: int = 384, heads: int = 6, depth: int = 6, patch: int = 16, classes: int = 1000
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (224 // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*(plan_zoo._Block(dim, heads, sdpa=True) for _ in range(depth)))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def build_vit_sdpa(batch_size: int) -> dict:
    labels = torch.randint(0, 1000, (batch_size,))
    return dict(
        model=_ViT(),
        inputs=torch.randn(batch_size, 3, 224, 224),
        optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3),
        loss_fn=lambda out: F.cross_entropy(out, labels),
    )


# -- ResNet, batch norm, channels_last -----------------------------------------------------------


class _Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (
            None
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


def build_resnet_cl(batch_size: int) -> dict:
    widths = (64, 128, 256, 512)
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for i, width in enumerate(widths):
        layers += [_Basic(cin, width, 1 if i == 0 else 2), _Basic(width, width, 1)]
        cin = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 100)).to(
        memory_format=torch.channels_last
    )
    images = torch.randn(batch_size, 3, 128, 128).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 100, (batch_size,))
    return dict(
        model=model,
        inputs=images,
        optimizer=lambda p: torch.optim.SGD(p, 0.1, momentum=0.9),
        loss_fn=lambda out: F.cross_entropy(out, labels),
    )


# -- GRU ------------------------------------------------------------------------------------------


class _Gru(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(64, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(x)[0])


def build_gru(batch_size: int) -> dict:
    target = torch.randn(batch_size, 128, 1)
    return dict(
        model=_Gru(),
        inputs=torch.randn(batch_size, 128, 64),
        optimizer=lambda p: torch.optim.Adam(p, 1e-3),
        loss_fn=lambda out: F.mse_loss(out, target),
    )


# -- diffusion U-Net with attention --------------------------------------------------------------


class _Res(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(tdim, cout)
        self.norm2, self.conv2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Identity() if cin == cout else nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x))) + self.time(t)[:, :, None, None]
        return self.conv2(F.silu(self.norm2(h))) + self.skip(x)


class _SelfAttention(nn.Module):
    def __init__(self, channels: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm, self.qkv, self.out = (
            nn.GroupNorm(8, channels),
            nn.Conv2d(channels, 3 * channels, 1),
            nn.Conv2d(channels, channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = (
            self.qkv(self.norm(x))
            .reshape(b, 3, self.heads, c // self.heads, h * w)
            .transpose(-1, -2)
            .unbind(1)
        )
        y = F.scaled_dot_product_attention(q, k, v).transpose(-1, -2).reshape(b, c, h, w)
        return x + self.out(y)


class _UNet(nn.Module):
    def __init__(self, base: int = 64, tdim: int = 256) -> None:
        super().__init__()
        self.tdim = tdim
        self.time = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.stem = nn.Conv2d(3, base, 3, padding=1)
        self.down1, self.down2 = _Res(base, base, tdim), _Res(base, 2 * base, tdim)
        self.mid, self.attn = _Res(2 * base, 2 * base, tdim), _SelfAttention(2 * base)
        self.up2, self.up1 = _Res(4 * base, base, tdim), _Res(2 * base, base, tdim)
        self.head = nn.Conv2d(base, 3, 3, padding=1)

    def embed(self, steps: torch.Tensor) -> torch.Tensor:
        half = self.tdim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=steps.device) / half)
        angles = steps[:, None].float() * freqs[None]
        return self.time(torch.cat([angles.sin(), angles.cos()], dim=1))

    def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        t = self.embed(steps)
        h1 = self.down1(self.stem(x), t)
        h2 = self.down2(F.avg_pool2d(h1, 2), t)
        m = self.attn(self.mid(F.avg_pool2d(h2, 2), t))
        u2 = self.up2(torch.cat([F.interpolate(m, scale_factor=2.0), h2], 1), t)
        u1 = self.up1(torch.cat([F.interpolate(u2, scale_factor=2.0), h1], 1), t)
        return self.head(u1)


def build_diffusion_unet(batch_size: int) -> dict:
    noise = torch.randn(batch_size, 3, 64, 64)
    return dict(
        model=_UNet(),
        inputs=(torch.randn(batch_size, 3, 64, 64), torch.randint(0, 1000, (batch_size,))),
        optimizer=lambda p: torch.optim.AdamW(p, 1e-4),
        loss_fn=lambda out: F.mse_loss(out, noise),
    )


# -- dropout ----------------------------------------------------------------------------------------


def build_dropout_mlp(batch_size: int) -> dict:
    model = nn.Sequential(
        nn.Linear(1024, 4096),
        nn.ReLU(),
        nn.Dropout(0.3),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Dropout(0.3),
        nn.Linear(4096, 10),
    )
    labels = torch.randint(0, 10, (batch_size,))
    return dict(
        model=model,
        inputs=torch.randn(batch_size, 1024),
        optimizer=lambda p: torch.optim.Adam(p, 1e-3),
        loss_fn=lambda out: F.cross_entropy(out, labels),
    )


#: name -> (build, batch, precision) as plan_gpu.py records them.
NEW = {
    "vit_sdpa": (build_vit_sdpa, 64, "bf16"),
    "resnet_cl": (build_resnet_cl, 64, "fp32"),
    "gru": (build_gru, 64, "fp32"),
    "diffusion_unet": (build_diffusion_unet, 16, "bf16"),
    "dropout_mlp": (build_dropout_mlp, 1024, "fp32"),
}
