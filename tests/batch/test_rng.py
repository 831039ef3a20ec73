"""Per-sample random streams: the same draws batched and one at a time, and draws that look random."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainmedic.batch import Rng
from trainmedic.batch.rng import sample_keys


def draws(rng: Rng):
    return (
        rng.normal((5,)),
        rng.normal((2, 3), mean=1.0, std=2.0, dtype=torch.float64),
        rng.complex_normal((3,)),
        rng.uniform((4,), low=-1.0, high=1.0),
        rng.integers(3, 9, (6,)),
        rng.normal(),  # a 0-d draw: the odd count of a Box-Muller pair
    )


def test_batched_draws_equal_per_sample_draws_bit_for_bit():
    keys = sample_keys(42, torch.arange(10, 74))
    batched = torch.func.vmap(lambda key: draws(Rng.from_key(key)))(keys)
    for i in range(64):
        for got, expected in zip(batched, draws(Rng(42, 10 + i))):
            assert torch.equal(got[i], expected), i


def test_streams_differ_by_seed_and_index_and_repeat_for_the_same_pair():
    a = Rng(1, 0).normal((100,))
    assert torch.equal(a, Rng(1, 0).normal((100,)))
    assert not torch.equal(a, Rng(2, 0).normal((100,)))
    assert not torch.equal(a, Rng(1, 1).normal((100,)))
    rng = Rng(1, 0)
    assert not torch.equal(rng.normal((100,)), rng.normal((100,)))  # the counter moves on


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normal_draws_have_the_moments_and_tails_of_a_gaussian(dtype):
    x = Rng(0, 3).normal((400_001,), dtype=dtype).double()
    assert x.dtype == torch.float64 and torch.isfinite(x).all()
    assert abs(x.mean().item()) < 0.01
    assert abs(x.std().item() - 1) < 0.01
    assert abs((x.abs() > 3).double().mean().item() - 0.0027) < 0.0006


def test_uniform_integers_and_complex_cover_their_ranges():
    u = Rng(7, 0).uniform((200_000,))
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.005
    counts = np.bincount(Rng(7, 1).integers(3, 9, (60_000,)).numpy())[3:]
    assert len(counts) == 6 and counts.min() > 9_400 and counts.max() < 10_600
    z = Rng(7, 2).complex_normal((200_000,), std=2.0)
    assert z.dtype == torch.complex64 and abs(z.abs().square().mean().item() - 4.0) < 0.05


def test_adjacent_samples_streams_are_uncorrelated():
    first = torch.stack([Rng(0, i).normal((64,)) for i in range(200)])
    corr = np.corrcoef(first.numpy())
    off_diagonal = corr[~np.eye(200, dtype=bool)]
    assert np.abs(off_diagonal).max() < 0.5 and abs(off_diagonal.mean()) < 0.01


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="index=-1"):
        Rng(0, -1)
    with pytest.raises(ValueError, match="high must be greater"):
        Rng().integers(5, 5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_draws_are_made_in_float32_and_stay_in_range(dtype):
    rng = Rng(0, 0)
    u = rng.uniform((20_000,), dtype=dtype)
    n = rng.normal((20_000,), dtype=dtype)
    assert u.dtype == n.dtype == dtype
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.float().mean().item() - 0.5) < 0.01
    assert torch.isfinite(n).all() and abs(n.float().std().item() - 1) < 0.03
    assert rng.complex_normal((4,), dtype=torch.complex128).dtype == torch.complex128
    with pytest.raises(ValueError, match=r"normal\(dtype=torch.int32\)"):
        rng.normal(dtype=torch.int32)


def test_integer_bounds_may_be_per_sample_tensors_under_vmap():
    highs = torch.arange(2, 66)
    keys = sample_keys(0, torch.arange(64))
    draws = torch.func.vmap(lambda key, high: Rng.from_key(key).integers(0, high, (50,)))(keys, highs)
    assert (draws >= 0).all() and (draws < highs[:, None]).all()
