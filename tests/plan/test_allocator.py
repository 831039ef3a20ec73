"""The caching-allocator model against the rules of PyTorch's c10/cuda/CUDACachingAllocator.cpp.

Every number below follows from those rules by hand (default settings: no expandable segments,
no max_split_size, no power-of-two rounding); each test is built so that one wrong rule (a
``>=`` for a ``>``, first-fit for best-fit, no merging, one shared pool) changes the number.
"""

from __future__ import annotations

import pytest

from trainmedic.plan.allocator import CachingAllocatorModel, replay, round_size, segment_size
from trainmedic.plan.tracker import ALLOC, FREE, Allocation

KiB = 1 << 10
MiB = 1 << 20


# -- rounding and segment sizes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "block"),
    [
        (1, 512),
        (511, 512),
        (512, 512),
        (513, 1024),
        (1024, 1024),
        (1025, 1536),
        (MiB, MiB),
        (MiB + 1, MiB + 512),
    ],
)
def test_round_size_is_next_multiple_of_512(request_bytes, block):
    assert round_size(request_bytes) == block


@pytest.mark.parametrize(
    ("rounded", "segment"),
    [
        (512, 2 * MiB),
        (MiB, 2 * MiB),  # kSmallSize itself is still the small pool
        (MiB + 512, 20 * MiB),  # first large size: a 20 MiB kLargeBuffer
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # kMinLargeAlloc: its own segment, rounded to 2 MiB
        (10 * MiB + 512, 12 * MiB),
        (11 * MiB, 12 * MiB),
        (12 * MiB, 12 * MiB),
        (1000 * MiB + 1, 1002 * MiB),
    ],
)
def test_segment_size(rounded, segment):
    assert segment_size(rounded) == segment


# -- the small pool -------------------------------------------------------------------------------


def test_tiny_requests_cost_whole_blocks_from_one_small_segment():
    model = CachingAllocatorModel()
    model.malloc(1)
    assert (model.allocated, model.reserved) == (512, 2 * MiB)
    model.malloc(513)
    assert (model.allocated, model.reserved) == (512 + 1024, 2 * MiB)


def test_small_pool_splits_a_remainder_of_exactly_512():
    model = CachingAllocatorModel()
    model.malloc(MiB)
    model.malloc(MiB - 512)  # leaves exactly kMinBlockSize: split (>=), not handed out whole
    assert (model.allocated, model.reserved) == (2 * MiB - 512, 2 * MiB)
    model.malloc(1)  # fits the 512 B remainder: no second segment
    assert (model.allocated, model.reserved) == (2 * MiB, 2 * MiB)


def test_small_pool_grows_by_2mib_segments():
    model = CachingAllocatorModel()
    for _ in range(4):
        model.malloc(512 * KiB)
    assert (model.allocated, model.reserved) == (2 * MiB, 2 * MiB)
    model.malloc(512 * KiB)
    assert (model.allocated, model.reserved) == (2 * MiB + 512 * KiB, 4 * MiB)


# -- the large pool -------------------------------------------------------------------------------


def test_requests_under_10mib_share_a_20mib_segment():
    model = CachingAllocatorModel()
    model.malloc(3 * MiB)
    assert (model.allocated, model.reserved) == (3 * MiB, 20 * MiB)
    model.malloc(3 * MiB)
    assert (model.allocated, model.reserved) == (6 * MiB, 20 * MiB)


def test_large_remainder_of_exactly_1mib_is_handed_out_and_counted():
    model = CachingAllocatorModel()
    model.malloc(9 * MiB + 512 * KiB)  # rest 10.5 MiB > 1 MiB: split
    assert model.allocated == 9 * MiB + 512 * KiB
    block = model.malloc(9 * MiB + 512 * KiB)  # rest exactly 1 MiB: not > kSmallSize, no split
    assert block.size == 10 * MiB + 512 * KiB
    assert (model.allocated, model.reserved) == (20 * MiB, 20 * MiB)


def test_large_remainder_just_over_1mib_is_split():
    model = CachingAllocatorModel()
    model.malloc(9 * MiB + 512 * KiB)
    model.malloc(9 * MiB + 512 * KiB - 512)  # rest 1 MiB + 512
    assert (model.allocated, model.reserved) == (19 * MiB - 512, 20 * MiB)


def test_request_of_10mib_or_more_gets_its_own_segment_rounded_to_2mib():
    model = CachingAllocatorModel()
    model.malloc(19 * MiB + 512 * KiB)  # segment 20 MiB, rest 0.5 MiB: handed out whole
    assert (model.allocated, model.reserved) == (20 * MiB, 20 * MiB)

    model = CachingAllocatorModel()
    model.malloc(10 * MiB + 1)  # rounds to 10 MiB + 512, segment 12 MiB, rest 2 MiB - 512: split
    assert (model.allocated, model.reserved) == (10 * MiB + 512, 12 * MiB)
    # A request under 10 MiB takes that cached rest (best fit) instead of a new 20 MiB segment,
    # and the 0.5 MiB - 512 left over is too small to split off.
    model.malloc(MiB + 512 * KiB)
    assert (model.allocated, model.reserved) == (12 * MiB, 12 * MiB)


# -- reuse, best fit, merging ---------------------------------------------------------------------


def test_freed_block_is_reused_before_asking_for_a_segment():
    model = CachingAllocatorModel()
    model.free(model.malloc(3 * MiB))
    assert (model.allocated, model.reserved) == (0, 20 * MiB)
    model.malloc(3 * MiB)
    assert (model.allocated, model.reserved) == (3 * MiB, 20 * MiB)


def test_best_fit_takes_the_smallest_block_that_fits_not_the_first():
    model = CachingAllocatorModel()
    big = model.malloc(16 * MiB)  # segment 0, lower address
    small = model.malloc(12 * MiB)  # segment 1
    model.free(big)
    model.free(small)
    block = model.malloc(11 * MiB)  # first fit would split the 16 MiB block: 11 MiB counted
    assert block.segment == 1
    assert model.allocated == 12 * MiB  # the 12 MiB block, rest 1 MiB not split
    model.malloc(16 * MiB)  # the 16 MiB block is still whole for this one
    assert (model.allocated, model.reserved) == (28 * MiB, 28 * MiB)


def test_best_fit_tie_goes_to_the_lowest_address():
    model = CachingAllocatorModel()
    first = model.malloc(12 * MiB)
    second = model.malloc(12 * MiB)
    model.free(second)
    model.free(first)
    assert model.malloc(12 * MiB).segment == 0


def test_freed_neighbours_merge_so_a_larger_request_reuses_the_segment():
    model = CachingAllocatorModel()
    a, b, _c = (model.malloc(6 * MiB) for _ in range(3))  # one 20 MiB segment, 2 MiB left
    model.free(a)
    model.free(b)  # merges with a: one 12 MiB free block
    model.malloc(10 * MiB)  # without the merge: a new 10 MiB segment
    assert (model.allocated, model.reserved) == (16 * MiB, 20 * MiB)


def test_freed_block_merges_with_the_free_rest_after_it():
    model = CachingAllocatorModel()
    model.malloc(6 * MiB)
    b = model.malloc(6 * MiB)  # the segment's free rest is now 8 MiB
    model.free(b)  # 6 + 8 = 14 MiB free
    block = model.malloc(13 * MiB)  # rest 1 MiB: the whole 14 MiB is handed out
    assert block.size == 14 * MiB
    assert (model.allocated, model.reserved) == (20 * MiB, 20 * MiB)


def test_freeing_the_middle_block_merges_both_sides_into_the_whole_segment():
    model = CachingAllocatorModel()
    a, b, c = (model.malloc(6 * MiB) for _ in range(3))
    model.free(a)
    model.free(c)  # merges with the 2 MiB rest
    model.free(b)  # merges with a before it and c + rest after it
    block = model.malloc(20 * MiB)
    assert (block.segment, block.offset, block.size) == (0, 0, 20 * MiB)
    assert (model.allocated, model.reserved) == (20 * MiB, 20 * MiB)


def test_small_and_large_pools_never_share_a_segment():
    model = CachingAllocatorModel()
    model.malloc(MiB + 1)  # large pool: 20 MiB segment with 19 MiB - 512 free
    model.malloc(1)  # small: a 2 MiB segment of its own
    assert (model.allocated, model.reserved) == (MiB + 1024, 22 * MiB)

    model = CachingAllocatorModel()
    model.free(model.malloc(512))  # a free 2 MiB small segment
    model.malloc(MiB + 512)  # would fit in 2 MiB, but it is a large request
    assert (model.allocated, model.reserved) == (MiB + 512, 22 * MiB)


def test_reserved_never_shrinks():
    model = CachingAllocatorModel()
    # 18 MiB does not fit the 17 MiB left of the 3 MiB tensor's segment: a segment of its own.
    blocks = [model.malloc(n) for n in (100, 3 * MiB, 18 * MiB, 700 * KiB)]
    assert model.reserved == 2 * MiB + 20 * MiB + 18 * MiB
    for block in blocks:
        model.free(block)
    assert (model.allocated, model.reserved) == (0, 40 * MiB)


def test_zero_byte_allocations_cost_nothing():
    model = CachingAllocatorModel()
    block = model.malloc(0)
    assert block is None
    model.free(block)
    assert (model.allocated, model.reserved) == (0, 0)


# -- replay ---------------------------------------------------------------------------------------


def _allocations(sizes: dict[int, int]) -> dict[int, Allocation]:
    return {
        sid: Allocation(sid, nbytes, "empty", "", "forward", (nbytes,), "uint8")
        for sid, nbytes in sizes.items()
    }


def test_replay_peaks_and_what_is_live_at_the_peak():
    allocations = _allocations({0: 100, 1: 1000, 2: 3 * MiB})
    events = [(ALLOC, 0), (ALLOC, 1), (FREE, 0), (ALLOC, 2), (FREE, 1), (FREE, 2)]

    gpu = replay(events, allocations, cuda=True)
    assert gpu.peak_allocated == 1024 + 3 * MiB
    assert gpu.peak_reserved == 2 * MiB + 20 * MiB
    assert gpu.peak_event == 3
    assert gpu.live_at_peak == {1: 1024, 2: 3 * MiB}

    cpu = replay(events, allocations, cuda=False)
    assert (cpu.peak_allocated, cpu.peak_reserved, cpu.peak_event) == (1000 + 3 * MiB, 1000 + 3 * MiB, 3)
    assert cpu.live_at_peak == {1: 1000, 2: 3 * MiB}


def test_replay_on_cpu_is_the_raw_byte_sum():
    sizes = {0: 7, 1: 513, 2: 1 << 21, 3: 3, 4: 10 * MiB + 1, 5: 0}
    events = [(ALLOC, 0), (ALLOC, 1), (ALLOC, 2), (FREE, 1), (ALLOC, 3), (ALLOC, 5), (FREE, 2), (ALLOC, 4)]
    events += [(FREE, 0), (FREE, 3), (FREE, 4), (FREE, 5)]
    result = replay(events, _allocations(sizes), cuda=False)
    # Running sums: 7, 520, 2 MiB+520, 2 MiB+7, 2 MiB+10, 2 MiB+10, 10, 10 MiB+11, ...
    assert result.peak_allocated == result.peak_reserved == 10 * MiB + 11
    assert result.peak_event == 7
    assert result.live_at_peak == {0: 7, 3: 3, 4: 10 * MiB + 1}

    gpu = replay(events, _allocations(sizes), cuda=True)
    # 512 + 512 + (10 MiB + 512). The 10 MiB tensor needs no segment of its own: the 2 MiB
    # tensor's 20 MiB segment is whole and free again by then, and is split for it.
    assert gpu.peak_allocated == 10 * MiB + 1536
    assert gpu.peak_reserved == 2 * MiB + 20 * MiB


def test_rounding_can_move_the_peak_to_another_moment():
    allocations = _allocations({0: 1, 1: 1, 2: 1, 3: 1000})
    events = [(ALLOC, 0), (ALLOC, 1), (ALLOC, 2), (FREE, 0), (FREE, 1), (FREE, 2), (ALLOC, 3)]

    gpu = replay(events, allocations, cuda=True)  # three 512 B blocks beat one 1024 B block
    assert (gpu.peak_allocated, gpu.peak_event, gpu.live_at_peak) == (1536, 2, {0: 512, 1: 512, 2: 512})
    assert gpu.peak_reserved == 2 * MiB

    cpu = replay(events, allocations, cuda=False)
    assert (cpu.peak_allocated, cpu.peak_event, cpu.live_at_peak) == (1000, 6, {3: 1000})


def test_replay_counts_a_block_handed_out_whole_at_its_block_size():
    allocations = _allocations({0: 6 * MiB, 1: 6 * MiB, 2: 13 * MiB})
    events = [(ALLOC, 0), (ALLOC, 1), (FREE, 1), (ALLOC, 2)]

    gpu = replay(events, allocations, cuda=True)
    assert gpu.live_at_peak == {0: 6 * MiB, 2: 14 * MiB}
    assert (gpu.peak_allocated, gpu.peak_reserved) == (20 * MiB, 20 * MiB)

    cpu = replay(events, allocations, cuda=False)
    assert cpu.live_at_peak == {0: 6 * MiB, 2: 13 * MiB}
    assert cpu.peak_allocated == 19 * MiB


def test_replay_peak_event_is_the_first_time_the_peak_is_reached():
    allocations = _allocations({0: 4096, 1: 4096, 2: 4096})
    events = [(ALLOC, 0), (ALLOC, 1), (FREE, 0), (ALLOC, 2), (FREE, 1), (FREE, 2)]
    for cuda in (True, False):
        result = replay(events, allocations, cuda=cuda)
        assert (result.peak_allocated, result.peak_event, result.live_at_peak) == (
            8192,
            1,
            {0: 4096, 1: 4096},
        )


def test_replay_zero_byte_allocation_is_not_live_and_costs_nothing():
    allocations = _allocations({0: 0, 1: 100})
    events = [(ALLOC, 0), (ALLOC, 1), (FREE, 0), (FREE, 1)]

    gpu = replay(events, allocations, cuda=True)
    assert (gpu.peak_allocated, gpu.peak_reserved, gpu.live_at_peak) == (512, 2 * MiB, {1: 512})

    cpu = replay(events, allocations, cuda=False)
    assert (cpu.peak_allocated, cpu.live_at_peak) == (100, {1: 100})

    only_empty = replay([(ALLOC, 0), (FREE, 0)], _allocations({0: 0}), cuda=True)
    assert (only_empty.peak_allocated, only_empty.peak_reserved, only_empty.live_at_peak) == (0, 0, {})
