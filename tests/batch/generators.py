"""Per-sample functions the batch tests run, importable by the child processes of the kill tests."""

from __future__ import annotations

import math

import numpy as np
import torch

RECEIVERS = torch.tensor([[0.0, 0.0], [3.0, 1.0], [-2.0, 2.5]])


def tone(freq, snr_db, rng, length: int = 64):
    """Elementwise only, no reductions and no ``**`` (the CPU's scalar and vector pow kernels round
    differently): the batched result must equal the per-sample one bit for bit."""
    t = torch.arange(length, dtype=torch.float32) / length
    clean = torch.polar(torch.ones(length), 2 * math.pi * freq * t)
    fading = rng.complex_normal((RECEIVERS.shape[0], 1))
    noise = rng.complex_normal((RECEIVERS.shape[0], length)) * torch.exp(snr_db * (-math.log(10) / 20))
    return {
        "iq": (clean * fading + noise).to(torch.complex64),
        "delay": rng.integers(0, 20, (RECEIVERS.shape[0],)),
    }


def tone_global(freq, snr_db, length: int = 64):
    """The same, drawing from torch's global generator."""
    t = torch.arange(length, dtype=torch.float32) / length
    return torch.polar(torch.ones(length), 2 * math.pi * freq * t) + torch.randn(length) * 10 ** (
        -snr_db / 20
    )


def params(samples: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "freq": rng.uniform(1, 8, samples).astype(np.float32),
        "snr_db": rng.uniform(0, 20, samples).astype(np.float32),
    }


def tone_global_loop(freq, snr_db, length: int = 64):
    """Global draws in a function vmap cannot batch (`.item()`): the loop, seeded per shard."""
    scale = float(snr_db.item()) / 20
    return torch.polar(torch.ones(length), torch.arange(length) * freq) + torch.randn(length) * scale
