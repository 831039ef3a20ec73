"""The epoch order: every sample once, seeded, per-epoch, block shuffle keeps blocks together."""

import numpy as np
import pytest

from trainmedic.data.order import batch_count, batch_slices, epoch_order


@pytest.mark.parametrize("block", [1, 7, 64])
def test_every_sample_exactly_once(block):
    order = epoch_order(1000, shuffle=True, seed=3, epoch=2, shuffle_block=block)
    assert order.dtype == np.int64
    assert np.array_equal(np.sort(order), np.arange(1000))


def test_same_seed_same_order_and_epochs_differ():
    a = epoch_order(500, shuffle=True, seed=11, epoch=0)
    assert np.array_equal(a, epoch_order(500, shuffle=True, seed=11, epoch=0))
    assert not np.array_equal(a, epoch_order(500, shuffle=True, seed=11, epoch=1))
    assert not np.array_equal(a, epoch_order(500, shuffle=True, seed=12, epoch=0))


def test_no_shuffle_is_sequential():
    assert np.array_equal(epoch_order(10, shuffle=False, seed=0, epoch=5), np.arange(10))


def test_block_shuffle_keeps_blocks_contiguous():
    order = epoch_order(100, shuffle=True, seed=0, epoch=0, shuffle_block=10)
    blocks = order.reshape(10, 10) // 10
    assert (blocks == blocks[:, :1]).all()  # each run of 10 comes from one block
    assert not np.array_equal(order, np.arange(100))


def test_batch_slices_and_count():
    assert batch_count(10, 4, drop_last=False) == 3
    assert batch_count(10, 4, drop_last=True) == 2
    assert list(batch_slices(10, 4, False)) == [(0, 4), (4, 8), (8, 10)]
    assert list(batch_slices(10, 4, True, start_batch=1)) == [(4, 8)]
