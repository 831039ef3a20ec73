"""How many samples one batched call may take: the memory one sample needs, and what is free.

The memory per sample is measured, not guessed: the batched function runs for real on 8 and
on 64 samples (``batch/measure.py``: live storage bytes on the CPU, the caching allocator's peak
on a GPU), and the difference of the two peaks is the cost of one more sample; what the
64-sample call needs beyond 64 of those is a fixed cost. A hand-made table of sizes
(256 samples: 391 MB) is the usual way; this measures the same thing per function. The
arithmetic from measured peaks to a batch size is :func:`choose_batch_size`, a pure function.

What is free: on CUDA the driver's free memory plus what this process's caching allocator holds
unused; on the CPU the available RAM, cgroup limits included (the same reading
``trainmedic.data`` chooses tiers with). Half of either is used: the rest belongs to the
process, the page cache, the shards in flight to the disk and, on a GPU, fragmentation.

On the CPU "fits in RAM" is the wrong goal: a call whose temporaries leave the caches runs at
the speed of page faults and DRAM. An IQ-sample generator at 1024 IQ samples took 274 µs a sample
in calls of 256 and 2,162 µs in calls of 2,048 on the 2-core dev VM, and at every IQ length
(64-1024) the fastest call's working set was 23-46 MiB beside its 32 MiB L3
(benchmarks/batch_generate.py). So a CPU call is kept to 1.5x the last-level cache. A GPU wants
the largest call that fits.

A shard (one file of the output) holds several calls: about SHARD_BYTES of output and at most
MAX_CALLS_PER_SHARD calls, so that a job of millions of samples is thousands of files, not
millions, and a stop waits for at most one shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainmedic.units import format_bytes

__all__ = ["MEASURE_SIZES", "Sizing", "choose_batch_size", "cost_per_sample", "free_bytes", "shard_size_for"]

#: Output bytes per shard: held on the host until written, and what a stop waits for.
SHARD_BYTES = 64 * 1024 * 1024
#: Measured peak of one CPU call, as a multiple of the last-level cache, and when none is known.
CACHE_SHARE = 1.5
DEFAULT_CPU_WORKING_SET = 48 * 1024 * 1024
MEMORY_SHARE = 0.5
#: Samples per call of a function that runs one sample at a time: each keeps Python objects
#: per output (~730 bytes for a 0-d tensor), and the loop gains nothing from longer calls.
LOOP_CALL = 1024
#: Calls per shard at most: a stop, a resume and the progress bar move at least this often.
MAX_CALLS_PER_SHARD = 64
#: Samples in the two real calls whose peaks give the cost of one sample.
MEASURE_SIZES = (8, 64)
_UNMEASURED_FACTOR = 8


@dataclass(frozen=True)
class Sizing:
    #: Samples per batched call.
    batch_size: int
    #: Samples per shard: a multiple of batch_size (or all samples).
    shard_size: int
    #: How the batch size was chosen, in one line, for the result and the log.
    why: str


def choose_batch_size(
    peaks: dict[int, int] | None,
    output_bytes_per_sample: int,
    samples: int,
    device: torch.device,
    free_bytes: int,
    working_set: int | None = None,
    looped: bool = False,
) -> Sizing:
    """Samples per call: the most (a multiple of 64 from 128 up) whose measured cost fits half of
    ``free_bytes``, and on the CPU also ``working_set``; then samples per shard.

    ``peaks``: the peak bytes of real calls by their number of samples (two sizes, from
    :func:`~trainmedic.batch.measure.peak_bytes`); None when they could not be measured (the
    outputs, times a margin, stand in). ``looped``: the function runs sample by sample, so only
    its outputs pile up. Pure arithmetic: the GPU's rule is tested on a machine without one."""
    budget = int(free_bytes * MEMORY_SHARE)
    held = max(1, output_bytes_per_sample)
    limits = {"its outputs in one shard": SHARD_BYTES // held}
    where = "RAM" if device.type == "cpu" else "GPU memory"
    if looped:
        limits[f"outputs in half the free {where}"] = budget // held
        limits["a function run one sample at a time"] = LOOP_CALL
        return _sizing(limits, samples, output_bytes_per_sample)
    cost = cost_per_sample(peaks) if peaks else None
    per_sample, fixed = cost if cost is not None else (held * _UNMEASURED_FACTOR, 0)
    label = (
        f"{format_bytes(per_sample)} a sample"
        if cost is not None
        else f"{_UNMEASURED_FACTOR}x its output a sample (unmeasured)"
    )
    # The fixed part (constants the call builds whatever its size) comes off the budget once.
    limits[f"{label} in half the free {where}"] = max(0, budget - fixed) // per_sample
    if device.type == "cpu":
        working_set = cpu_working_set() if working_set is None else working_set
        limits[f"{label} in a {format_bytes(working_set)} CPU working set"] = working_set // per_sample
    return _sizing(limits, samples, output_bytes_per_sample)


def cost_per_sample(peaks: dict[int, int]) -> tuple[int, int] | None:
    """(bytes per sample, fixed bytes) from the peaks of two calls of different sizes: the slope
    and what the larger call needs beyond it; None with fewer than two sizes."""
    if len(peaks) < 2:
        return None
    (small, low), (large, high) = min(peaks.items()), max(peaks.items())
    slope = max(1, int(np.ceil((high - low) / (large - small))))
    return slope, max(0, high - slope * large)


def _sizing(limits: dict[str, int], samples: int, output_bytes: int) -> Sizing:
    binding = min(limits, key=limits.__getitem__)
    size = _round(min(samples, limits[binding]), samples)
    why = (
        f"{size} samples per call: all {samples}"
        if size == samples
        else f"{size} samples per call ({binding})"
    )
    return Sizing(size, shard_size_for(size, output_bytes, samples), why)


def shard_size_for(batch_size: int, output_bytes_per_sample: int, samples: int) -> int:
    """Whole calls per shard: about SHARD_BYTES of output, 1 to MAX_CALLS_PER_SHARD calls."""
    calls = min(MAX_CALLS_PER_SHARD, max(1, SHARD_BYTES // max(1, output_bytes_per_sample * batch_size)))
    return min(samples, calls * batch_size)


def _round(size: int, samples: int) -> int:
    size = max(1, size)
    if 128 <= size < samples:
        size -= size % 64
    return size


def cpu_working_set() -> int:
    """CACHE_SHARE x the largest CPU cache Linux reports (sysfs), else DEFAULT_CPU_WORKING_SET."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        try:
            value = int(text.rstrip("KMG"))
        except ValueError:
            continue
        sizes.append(value * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1))
    return int(CACHE_SHARE * max(sizes)) if sizes else DEFAULT_CPU_WORKING_SET


def free_bytes(device: torch.device) -> int:
    """Memory a job's calls may use: on CUDA what the driver has free plus what this process's
    caching allocator holds unused (it hands that out first); on the CPU the available RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free) + int(torch.cuda.memory_reserved(device)) - int(torch.cuda.memory_allocated(device))
    from trainmedic.data.choose import measure_resources

    return int(measure_resources(device, Path.cwd()).ram_available)
