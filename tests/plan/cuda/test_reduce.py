"""The reduction staging buffer against the sizes an H200's caching allocator recorded.

Each case is a bias gradient (a sum over the batch of a linear layer's output gradient) seen in
tests/plan/gpu_truth: the buffer and its semaphores, to the byte.
"""

from __future__ import annotations

import pytest
import torch

from trainmedic.devices import get_device
from trainmedic.plan.cuda.reduce import buffers, reduction_of

H200 = get_device("h200")


@pytest.mark.parametrize(
    ("shape", "staging", "semaphores"),
    [
        ((4096, 4096), 134_217_728, 128),  # models/mlp_adam.py: 128 MiB to sum 64 MiB into 16 KiB
        ((2048, 32000), 147_456_000, 1_000),  # models/gpt1b.py's output layer
        ((2048, 8192), 134_217_728, 256),  # its feed-forward layer
        ((2048, 6144), 100_663_296, 192),  # its packed q, k, v projection
        ((2048, 2048), 33_554_432, 64),  # its out projection
    ],
)
def test_a_bias_gradients_staging_buffer_is_the_cards(shape, staging, semaphores):
    grad = torch.empty(shape, device="meta")
    assert buffers(reduction_of(grad, [0], 4), H200.sm_count, H200.threads_per_sm) == (staging, semaphores)


def test_a_reduction_with_outputs_enough_to_fill_the_card_needs_no_buffer():
    # 4096 rows of 4096 reduced along each row: one block per output, no split.
    grad = torch.empty(4096, 4096, device="meta")
    assert buffers(reduction_of(grad, [1], 4), H200.sm_count, H200.threads_per_sm) == (0, 0)


def test_the_buffer_follows_the_cards_size():
    # Fewer SMs, fewer blocks to fill: a T4 (40 SMs of 1024 threads) splits less.
    grad = torch.empty(4096, 4096, device="meta")
    t4 = get_device("t4")
    t4_staging, _ = buffers(reduction_of(grad, [0], 4), t4.sm_count, t4.threads_per_sm)
    assert 0 < t4_staging < 134_217_728


def test_dimensions_are_sorted_and_coalesced_as_tensor_iterator_does():
    # A (B, C, H, W) gradient reduced over every dimension but channels: a conv's bias gradient.
    grad = torch.empty(8, 16, 4, 4, device="meta")
    reduction = reduction_of(grad, [0, 2, 3], 4)
    assert reduction.num_reduce_dims == 2  # H and W coalesce; B stays apart across C
    assert reduction.shape == (16, 8, 16)
