"""The two post-mortems that asked for a planner, replayed through it.

Seed 000 asked a 48 GB card for attention over 448×14 = 6272 tokens at batch 64; seed 004's
CIFAR-10 run crashed a T4 with a tensorized Sinkhorn cost (N·N·D at N=128, D=3072).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from formula_kit import assert_multiplies_out

from trainmedic.plan import plan_memory

GiB = 1 << 30


class Attention(nn.Module):
    """Seed 000's attention block: four heads of key_dim 64, scores materialised in fp32."""

    def __init__(self, dim: int = 128, heads: int = 4, key_dim: int = 64) -> None:
        super().__init__()
        self.heads, self.key_dim = heads, key_dim
        self.qkv = nn.Linear(dim, 3 * heads * key_dim)
        self.out = nn.Linear(heads * key_dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.key_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / self.key_dim**0.5
        weights = scores.softmax(dim=-1)  # SCORES LINE
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, -1))


class Seed000(nn.Module):
    def __init__(self, pool: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 128, 3, padding=1)
        self.pool = nn.MaxPool2d(pool) if pool > 1 else nn.Identity()
        self.attn = Attention()
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        h = self.pool(torch.relu(self.conv(x))).flatten(2).transpose(1, 2)  # [B, 448·14 / pool², 128]
        return self.head(self.attn(h).mean(1))


def seed000(batch_size: int, pool: int = 1) -> dict:
    return dict(
        model=Seed000(pool),
        inputs=torch.randn(batch_size, 1, 448, 14),
        optimizer=lambda p: torch.optim.Adam(p, 1e-3),
    )


@pytest.mark.slow
def test_seed000_attention_at_batch_64_does_not_fit_48_gb_and_names_the_scores():
    plan = plan_memory(seed000, 64, capacity="48GiB")
    assert not plan.fits
    # One [64, 4, 6272, 6272] fp32 tensor is the seed's own 40 GB arithmetic (37.5 GiB).
    assert plan.peak_bytes > 3 * 64 * 4 * 6272**2 * 4
    top = plan.hotspots[0]
    assert "B·H·S²·bytes = 2 × 64·4·6272²·4 = 75.0 GiB" in " ".join(h.formula for h in plan.hotspots)
    for hotspot in plan.hotspots:
        assert_multiplies_out(hotspot.formula, hotspot.bytes)
    assert any(
        h.where.endswith(f"test_seed_scenarios.py:{_line('SCORES LINE')}") and "softmax" in h.op
        for h in plan.hotspots
    )
    assert top.bytes >= 64 * 4 * 6272**2 * 4
    assert "scaled_dot_product_attention" in top.advice and "pool tokens" in top.advice
    assert "gradient accumulation" in top.advice


@pytest.mark.slow
def test_seed000_max_batch_and_pooling_show_what_fits():
    plan = plan_memory(seed000, capacity="48GiB", max_batch=True, headroom=0.1)
    assert 1 <= plan.max_batch < 64
    assert plan.fits and plan.batch_size == plan.max_batch
    # Only whether they fit is read below: no second trace for how the hotspots grow.
    over = plan_memory(seed000, plan.max_batch + 1, capacity="48GiB", headroom=0.1, measure_growth=False)
    assert not over.fits
    # The seed's own fix: pooling 2×2 before attention (6272 → 1568 tokens) fits at batch 64.
    pooled = plan_memory(
        lambda b: seed000(b, pool=2), 64, capacity="48GiB", headroom=0.1, measure_growth=False
    )
    assert pooled.fits


class VelocityNet(nn.Module):
    """A stand-in for seed 004's 38M-parameter UNet: convolutions over 3×32×32 CIFAR images."""

    def __init__(self, width: int = 128, depth: int = 1) -> None:
        super().__init__()
        blocks = [nn.Conv2d(3, width, 3, padding=1)]
        for _ in range(depth):
            blocks += [nn.GroupNorm(32, width), nn.SiLU(), nn.Conv2d(width, width, 3, padding=1)]
        self.net = nn.Sequential(
            *blocks, nn.GroupNorm(32, width), nn.SiLU(), nn.Conv2d(width, 3, 3, padding=1)
        )

    def forward(self, x):
        return self.net(x)


def tensorized_cost(x, y):
    return ((x[:, None, :] - y[None, :, :]).abs() ** 2).sum(-1) / 2  # COST LINE


def sinkhorn(x, y, iterations: int = 5, eps: float = 0.5):
    # A tensorized Sinkhorn as a first implementation writes it: the cost is rebuilt in every
    # iteration, and autograd keeps each N·N·D intermediate for the backward pass.
    f = torch.zeros(x.shape[0])
    g = torch.zeros(y.shape[0])
    for _ in range(iterations):
        cost = tensorized_cost(x, y)
        f = -eps * torch.logsumexp((g[None, :] - cost) / eps, dim=1)
        g = -eps * torch.logsumexp((f[:, None] - cost) / eps, dim=0)
    return f.mean() + g.mean()


def flow_loss(model, x, target, steps: int = 5, calls_per_step: int = 2):
    # Seed 004: the flow takes 5 steps with 2 Sinkhorn calls each on the flattened images.
    loss = 0.0
    for _ in range(steps):
        x = x + model(x) / steps
        for _ in range(calls_per_step):
            loss = loss + sinkhorn(x.flatten(1), target)
    return loss


class Flow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.velocity = VelocityNet()

    def forward(self, x, target):
        return flow_loss(self.velocity, x, target)


def seed004(batch_size: int) -> dict:
    inputs = (torch.randn(batch_size, 3, 32, 32), torch.randn(batch_size, 3072))
    return dict(
        model=Flow(), inputs=inputs, optimizer=lambda p: torch.optim.Adam(p, 1e-4), loss_fn=lambda loss: loss
    )


@pytest.mark.slow
def test_seed004_sinkhorn_cost_is_the_hotspot_with_its_closed_form():
    plan = plan_memory(seed004, 128, device="t4")
    top = plan.hotspots[0]
    assert top.where.endswith(f"test_seed_scenarios.py:{_line('COST LINE')}")
    assert "N·M·D·bytes = 103 × 128·128·3072·4 = 19.3 GiB" in top.formula
    assert "grows faster than the batch" in top.advice  # N and M are both the batch
    for hotspot in plan.hotspots:
        assert_multiplies_out(hotspot.formula, hotspot.bytes)
    assert top.bytes >= 10 * 128 * 128 * 3072 * 4  # ten calls, each cost kept for backward
    assert "cdist" in top.advice and "chunks" in top.advice
    assert not plan.fits


@pytest.mark.slow
def test_seed004_max_batch_on_a_t4():
    plan = plan_memory(seed004, device="t4", max_batch=True)
    assert 32 <= plan.max_batch < 128  # the seed's own fix was 32
    assert plan.fits
    # Batches 1 and 8, the line's 354, the fits' 89 and 90, then the batch after 90 on the fit's
    # word: not the middle of 90..354 first.
    assert any(note.startswith("max batch from 6 traces") for note in plan.notes), plan.notes
    assert not plan_memory(seed004, plan.max_batch + 1, device="t4", measure_growth=False).fits


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(
            i for i, text in enumerate(f, 1) if text.rstrip().endswith(marker) and "_line(" not in text
        )
