"""Replay a trace's allocations through a model of PyTorch's CUDA caching allocator.

``torch.cuda.max_memory_allocated`` counts the allocator's *blocks*, not the bytes tensors asked
for, and ``max_memory_reserved`` counts the segments it got from cudaMalloc. Both follow from
the constants and rules of ``c10/cuda/CUDACachingAllocator.cpp`` (default settings: no
expandable segments, no ``max_split_size_mb``, no power-of-two rounding):

- a request rounds up to 512 B;
- up to 1 MiB it comes from the small pool, which grows by 2 MiB segments;
- larger requests come from the large pool: under 10 MiB by 20 MiB segments, else by the
  request rounded up to 2 MiB;
- a free block is reused best-fit (smallest block that is large enough, lowest address first)
  and split when the rest is worth keeping (>= 512 B small, > 1 MiB large); an unsplit block is
  handed out, and counted, whole;
- a freed block merges with free neighbours in its segment; segments are never returned
  (no ``empty_cache``; a real OOM would first free cached segments and retry, so the reserved
  peak here is the conservative one).

``--device cpu`` replays the same events with no rounding: the CPU allocator hands out what
tensors ask for.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from trainmedic.plan.tracker import ALLOC, Allocation

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
LARGE_BUFFER = 20 << 20


def round_size(size: int) -> int:
    """The block size the allocator hands out for a request of ``size`` bytes."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(size: int) -> int:
    """How much cudaMalloc the allocator asks for when no cached block fits a rounded request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class Replay:
    """The outcome of replaying a trace: peaks, and what was live at the allocated peak."""

    peak_allocated: int
    peak_reserved: int
    #: Block bytes per allocation id live at the moment of the allocated peak.
    live_at_peak: dict[int, int] = field(default_factory=dict)
    peak_event: int = 0


class _Pool:
    def __init__(self) -> None:
        self._free: list[tuple[int, int, int]] = []  # (size, segment, offset), sorted
        self._blocks: dict[tuple[int, int, int], _Block] = {}

    def add(self, block: _Block) -> None:
        key = (block.size, block.segment, block.offset)
        bisect.insort(self._free, key)
        self._blocks[key] = block

    def remove(self, block: _Block) -> None:
        key = (block.size, block.segment, block.offset)
        index = bisect.bisect_left(self._free, key)
        del self._free[index]
        del self._blocks[key]

    def best_fit(self, size: int) -> _Block | None:
        index = bisect.bisect_left(self._free, (size, -1, -1))
        if index == len(self._free):
            return None
        return self._blocks[self._free[index]]


class CachingAllocatorModel:
    """Blocks, segments and pools, enough to reproduce the allocator's counters."""

    def __init__(self) -> None:
        self.small = _Pool()
        self.large = _Pool()
        self.allocated = 0
        self.reserved = 0
        self._segments = 0

    def malloc(self, nbytes: int) -> _Block | None:
        if nbytes <= 0:
            return None  # a zero-byte tensor has no block on the GPU
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self.small if small else self.large
        block = pool.best_fit(size)
        if block is None:
            seg_size = segment_size(size)
            block = _Block(self._segments, 0, seg_size, small)
            self._segments += 1
            self.reserved += seg_size
        else:
            pool.remove(block)
        remaining = block.size - size
        if (small and remaining >= MIN_BLOCK) or (not small and remaining > SMALL_SIZE):
            rest = _Block(block.segment, block.offset + size, remaining, small, True, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            pool.add(rest)
        block.free = False
        self.allocated += block.size
        return block

    def free(self, block: _Block | None) -> None:
        if block is None:
            return
        self.allocated -= block.size
        pool = self.small if block.small else self.large
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                pool.remove(neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        pool.add(block)


def replay(events: list[tuple[str, int]], allocations: dict[int, Allocation], cuda: bool) -> Replay:
    """Peak allocated and reserved bytes of a trace, on a CUDA device or on the CPU."""
    if not cuda:
        return _replay_exact(events, allocations)
    model = CachingAllocatorModel()
    blocks: dict[int, _Block | None] = {}
    sizes: dict[int, int] = {}
    peak, peak_event = 0, 0
    for index, (kind, sid) in enumerate(events):
        if kind == ALLOC:
            block = model.malloc(allocations[sid].nbytes)
            blocks[sid] = block
            if block is not None:
                sizes[sid] = block.size  # the size it was handed, before neighbours merge into it
            if model.allocated > peak:
                peak, peak_event = model.allocated, index
        else:
            model.free(blocks.pop(sid, None))
    return Replay(peak, model.reserved, _live_at(events, peak_event, sizes), peak_event)


def _replay_exact(events: list[tuple[str, int]], allocations: dict[int, Allocation]) -> Replay:
    sizes = {sid: a.nbytes for sid, a in allocations.items() if a.nbytes}
    current, peak, peak_event = 0, 0, 0
    for index, (kind, sid) in enumerate(events):
        if kind == ALLOC:
            current += sizes.get(sid, 0)
            if current > peak:
                peak, peak_event = current, index
        else:
            current -= sizes.get(sid, 0)
    return Replay(peak, peak, _live_at(events, peak_event, sizes), peak_event)


def _live_at(events: list[tuple[str, int]], last: int, sizes: dict[int, int]) -> dict[int, int]:
    # A second pass to the peak, so the replay itself never copies the live set.
    live: dict[int, int] = {}
    for kind, sid in events[: last + 1]:
        if kind == ALLOC:
            if sid in sizes:
                live[sid] = sizes[sid]
        else:
            live.pop(sid, None)
    return live
