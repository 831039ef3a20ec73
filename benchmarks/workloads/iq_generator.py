"""Seed 001's generator, per sample: complex baseband IQ of one transmitter at 7 receivers.

For each transmitter position the 7 receivers get a frequency-modulated carrier at its offset,
delayed by the path length, through a multipath channel (a direct path plus ``TAPS - 1`` echoes
with random delays of up to 20 samples and complex gains), block
Rayleigh fading, the path-loss power, and white Gaussian noise at the sample's SNR. Written the
way the seed wrote it: one sample per call, the random draws from the sample's own stream.

``iq_sample`` takes ``rng`` (a ``trainmedic.batch.Rng``); ``iq_sample_global`` is the same code
drawing from torch's global generator, as a user's script would before adopting ``rng``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

RECEIVERS = torch.tensor(
    [[0.0, 0.0], [12.0, 3.0], [-8.0, 9.0], [5.0, -11.0], [-14.0, -6.0], [9.0, 14.0], [-3.0, -15.0]]
)  # km
TAPS = 3
SAMPLE_RATE = 200e3  # Hz
LIGHT_KM_PER_S = 299_792.458


def params(samples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One row per transmitter: position (km), carrier offset (Hz), FM depth, power (dBm), SNR (dB)."""
    rng = np.random.default_rng(seed)
    return {
        "tx_x": rng.uniform(-20, 20, samples).astype(np.float32),
        "tx_y": rng.uniform(-20, 20, samples).astype(np.float32),
        "offset_hz": rng.uniform(-20e3, 20e3, samples).astype(np.float32),
        "fm_depth": rng.uniform(0.5, 3.0, samples).astype(np.float32),
        "power_dbm": rng.uniform(10, 40, samples).astype(np.float32),
        "snr_db": rng.uniform(3, 25, samples).astype(np.float32),
    }


def _channel(tx_x, tx_y, offset_hz, fm_depth, power_dbm, snr_db, length, draw_normal, draw_integers):
    t = torch.arange(length, dtype=torch.float32) / SAMPLE_RATE
    dx = RECEIVERS[:, 0] - tx_x
    dy = RECEIVERS[:, 1] - tx_y
    distance = torch.sqrt(dx * dx + dy * dy) + 0.1  # [7] km
    delay = distance / LIGHT_KM_PER_S  # s
    # FM carrier at the offset, 1 kHz tone, each receiver seeing it `delay` later.
    local = t[None, :] - delay[:, None]
    phase = 2 * math.pi * offset_hz * local + fm_depth * torch.sin(2 * math.pi * 1e3 * local)
    clean = torch.polar(torch.ones_like(phase), phase)  # [7, L]
    # Multipath: the direct path plus TAPS - 1 echoes, each up to 20 samples late with a
    # complex gain (integer delays, as np.roll-style generators write them).
    receivers = RECEIVERS.shape[0]
    late = draw_integers((receivers, TAPS - 1))
    index = (torch.arange(length)[None, None, :] - late[:, :, None]).clamp(min=0)  # [7, taps-1, L]
    echoes = torch.gather(clean[:, None, :].expand(-1, TAPS - 1, -1), 2, index)
    multipath = clean + (0.5 * draw_normal((receivers, TAPS - 1, 1)) * echoes).sum(dim=1)
    # Block Rayleigh fading per receiver, then the path-loss power (free space, dBm).
    faded = multipath * draw_normal((RECEIVERS.shape[0], 1))
    received_dbm = power_dbm - 20 * torch.log10(distance) - 92.45 - 20 * math.log10(0.145)
    scale = torch.sqrt(10 ** (received_dbm / 10) / (faded.abs().square().mean(dim=-1) + 1e-12))
    signal = faded * scale[:, None]
    noise_power = 10 ** ((received_dbm - snr_db) / 10)
    noise = draw_normal((RECEIVERS.shape[0], length)) * torch.sqrt(noise_power)[:, None]
    return signal + noise


def iq_sample(tx_x, tx_y, offset_hz, fm_depth, power_dbm, snr_db, rng, length: int = 1024):
    """[7, length] complex64 IQ for one transmitter; draws from the sample's ``rng``."""
    return _channel(
        tx_x,
        tx_y,
        offset_hz,
        fm_depth,
        power_dbm,
        snr_db,
        length,
        lambda shape: rng.complex_normal(shape),
        lambda shape: rng.integers(0, 21, shape),
    ).to(torch.complex64)


def iq_sample_global(tx_x, tx_y, offset_hz, fm_depth, power_dbm, snr_db, length: int = 1024):
    """The same sample drawn from torch's global generator (the user's code before ``rng``)."""
    return _channel(
        tx_x,
        tx_y,
        offset_hz,
        fm_depth,
        power_dbm,
        snr_db,
        length,
        lambda shape: torch.randn(shape, dtype=torch.complex64),
        lambda shape: torch.randint(0, 21, shape),
    ).to(torch.complex64)
