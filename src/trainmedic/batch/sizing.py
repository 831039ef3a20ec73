"""How many samples one batched call may take: the memory one sample needs, and what is free.

The memory per sample comes from the planner's machinery, not a guess: the batched function is
traced under fake tensors (no memory used, no device touched) at two batch sizes, the storages'
lives replayed through the allocator model (CUDA's caching allocator on a GPU, exact bytes on the
CPU), and the difference of the two peaks is the cost of one more sample. Seed 001 sized its
batches from a hand-made table (256 samples: 391 MB); this measures the same thing per function.

What is free: on CUDA the driver's free memory; on the CPU the available RAM, cgroup limits
included (the same reading ``trainmedic.data`` chooses tiers with). Half of either is used: the
rest belongs to the process, the page cache and the shard being written.

On the CPU "fits in RAM" is the wrong goal: a call whose temporaries leave the caches runs at
the speed of page faults and DRAM. Seed 001's generator at 1024 IQ samples took 274 µs a sample
in calls of 256 and 2,162 µs in calls of 2,048 on the 2-core dev VM, and at every IQ length
(64-1024) the fastest call's traced working set was 23-46 MiB beside its 32 MiB L3
(benchmarks/batch_generate.py). So a CPU call is kept to 1.5x the last-level cache. A GPU wants
the largest call that fits.

A shard (one file of the output) holds several calls: about SHARD_BYTES of output and at most
MAX_CALLS_PER_SHARD calls, so that a job of millions of samples is thousands of files, not
millions, and a stop waits for at most one shard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainmedic.units import format_bytes

__all__ = ["Sizing", "choose_batch_size"]

#: Output bytes per shard: held on the host until written, and what a stop waits for.
SHARD_BYTES = 64 * 1024 * 1024
#: Traced peak of one CPU call, as a multiple of the last-level cache, and when none is known.
CACHE_SHARE = 1.5
DEFAULT_CPU_WORKING_SET = 48 * 1024 * 1024
MEMORY_SHARE = 0.5
#: Samples per call of a function that runs one sample at a time: each keeps Python objects
#: per output (~730 bytes for a 0-d tensor), and the loop gains nothing from longer calls.
LOOP_CALL = 1024
#: Calls per shard at most: a stop, a resume and the progress bar move at least this often.
MAX_CALLS_PER_SHARD = 64
_TRACE_SIZES = (8, 64)
_UNTRACED_FACTOR = 8


@dataclass(frozen=True)
class Sizing:
    #: Samples per batched call.
    batch_size: int
    #: Samples per shard: a multiple of batch_size (or all samples).
    shard_size: int
    #: How the batch size was chosen, in one line, for the result and the log.
    why: str


def choose_batch_size(
    call: Callable[[dict[str, Any]], Any] | None,
    rows: Callable[[int], dict[str, Any]],
    output_bytes_per_sample: int,
    samples: int,
    device: torch.device,
) -> Sizing:
    """Samples per call: the most (a multiple of 64 from 128 up) whose traced peak fits half the
    free memory, and on the CPU also CPU_WORKING_SET; then samples per shard. ``call`` runs the
    batched function on a dict of columns (None for a function that runs sample by sample:
    only its outputs pile up)."""
    budget = int(_free_bytes(device) * MEMORY_SHARE)
    held = max(1, output_bytes_per_sample)
    limits = {"its outputs in one shard": SHARD_BYTES // held}
    where = "RAM" if device.type == "cpu" else "GPU memory"
    if call is None:
        limits[f"outputs in half the free {where}"] = budget // held
        limits["a function run one sample at a time"] = LOOP_CALL
        return _sizing(limits, samples, output_bytes_per_sample)
    per_sample = _traced_bytes_per_sample(call, rows, device)
    label = f"{format_bytes(per_sample)} a sample" if per_sample is not None else f"{_UNTRACED_FACTOR}x its output a sample (untraced)"
    # An op fake tensors cannot run leaves the memory untraced: the outputs, times a margin for
    # temporaries, stand in, so the working-set rule still holds.
    cost = per_sample if per_sample is not None else held * _UNTRACED_FACTOR
    limits[f"{label} in half the free {where}"] = budget // cost
    if device.type == "cpu":
        working_set = cpu_working_set()
        limits[f"{label} in a {format_bytes(working_set)} CPU working set"] = working_set // cost
    return _sizing(limits, samples, output_bytes_per_sample)


def _sizing(limits: dict[str, int], samples: int, output_bytes: int) -> Sizing:
    binding = min(limits, key=limits.get)
    size = _round(min(samples, limits[binding]), samples)
    why = f"{size} samples per call: all {samples}" if size == samples else f"{size} samples per call ({binding})"
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


def _traced_bytes_per_sample(call: Callable, rows: Callable[[int], dict], device: torch.device) -> int | None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmedic.plan.allocator import replay
    from trainmedic.plan.tracker import StorageTracker

    peaks = []
    try:
        for size in _TRACE_SIZES:
            fake = FakeTensorMode(allow_non_fake_inputs=True)
            tracker = StorageTracker()
            with fake:
                inputs = {name: fake.from_tensor(value) for name, value in rows(size).items()}
                with tracker:
                    call(inputs)
            peaks.append(replay(tracker.events, tracker.allocations, cuda=device.type == "cuda").peak_allocated)
    except Exception:  # noqa: BLE001 - an op fake tensors cannot run: the outputs alone size the call
        return None
    slope = (peaks[1] - peaks[0]) / (_TRACE_SIZES[1] - _TRACE_SIZES[0])
    return max(1, int(np.ceil(slope)))


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    from trainmedic.data.choose import measure_resources

    return int(measure_resources(device, Path.cwd()).ram_available)
