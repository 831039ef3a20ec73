"""A shard's outputs gathered on the host, call by call, ready for the writer thread.

CPU: a call's outputs are host memory already (``Tensor.numpy()`` shares it); the calls of a
shard are joined once, by ``np.concatenate``, which is the job's whole "copy" stage.

CUDA: after each call an event is recorded on the compute stream, and a side stream waits for
it and copies the outputs into pinned host buffers. The copy of call k then overlaps the
compute of call k+1 (a pageable copy would block the host and the GPU), and the writer thread,
not the generating one, waits for the last copy of a shard before it reads the buffers.
Pinned memory is slow to allocate and scarce, so a shard's buffers come from a pool of
``depth + 2`` sets (one being filled, ``depth`` waiting for the writer, one being written),
made on first use and reused shard after shard. Stage times on CUDA come from CUDA events: a
host timer would see only the launches: CPU timers misattribute asynchronous work.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainmedic.data.sources.arrays import to_numpy

__all__ = ["CpuShards", "CudaShards", "HostShard"]


@dataclass
class HostShard:
    """One shard on its way to the disk: ``arrays`` may be read once ``wait()`` returned, and
    ``release()`` hands its buffers back once the shard is written."""

    index: int
    arrays: dict[str, np.ndarray]
    wait: Callable[[], None] = lambda: None
    release: Callable[[], None] = lambda: None
    #: Seconds of device work measured by events, known once ``wait()`` returned (CUDA only).
    device_seconds: Callable[[], dict[str, float]] = field(default=dict)


class CpuShards:
    """Calls' outputs kept as the NumPy views they are, joined when the shard is whole."""

    #: Host timers measure the work itself on the CPU: the stages are timed where they run.
    host_timed = True

    def begin(self, index: int, rows: int) -> _CpuShard:
        return _CpuShard(index)


class _CpuShard:
    def __init__(self, index: int) -> None:
        self.index = index
        self.parts: list[dict[str, np.ndarray]] = []

    def call_started(self) -> None:
        pass

    def add(self, offset: int, named: dict[str, Any]) -> None:
        self.parts.append({name: to_numpy(value) for name, value in named.items()})

    def finish(self) -> tuple[HostShard, float]:
        """The shard, and the seconds its copy (the concatenation) took."""
        started = time.perf_counter()
        parts = self.parts
        arrays = (
            parts[0]
            if len(parts) == 1
            else {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        )
        self.parts = []
        return HostShard(self.index, arrays), time.perf_counter() - started


class CudaShards:
    """Side-stream copies into a pool of pinned buffers; see the module's docstring."""

    host_timed = False

    def __init__(self, device: torch.device, shard_rows: int, depth: int) -> None:
        self.device = device
        self.shard_rows = shard_rows
        self.side = torch.cuda.Stream(device)
        self.sets = depth + 2
        self._made = 0
        self._free: queue.SimpleQueue = queue.SimpleQueue()

    def begin(self, index: int, rows: int) -> _CudaShard:
        return _CudaShard(self, index, rows)

    def take(self, named: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self._made < self.sets:
            self._made += 1
            return {
                name: torch.empty((self.shard_rows, *value.shape[1:]), dtype=value.dtype, pin_memory=True)
                for name, value in named.items()
            }
        # Every set is made: one comes back when the writer finishes a shard. The writer's queue
        # holds at most `depth`, so by the time a shard begins one set is always free.
        return self._free.get()

    def give_back(self, buffers: dict[str, torch.Tensor]) -> None:
        self._free.put(buffers)


class _CudaShard:
    def __init__(self, owner: CudaShards, index: int, rows: int) -> None:
        self.owner = owner
        self.index = index
        self.rows = rows
        self.buffers: dict[str, torch.Tensor] | None = None
        self.events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._call_started: torch.cuda.Event | None = None

    def call_started(self) -> None:
        self._call_started = _timing_event(torch.cuda.current_stream(self.owner.device))

    def add(self, offset: int, named: dict[str, Any]) -> None:
        device = self.owner.device
        compute = torch.cuda.current_stream(device)
        named = {name: _on_device(value, device) for name, value in named.items()}
        if self.buffers is None:
            self.buffers = self.owner.take(named)
        computed = _timing_event(compute)
        if self._call_started is not None:
            self.events.append(("generate", self._call_started, computed))
            self._call_started = None
        side = self.owner.side
        side.wait_event(computed)
        with torch.cuda.stream(side):
            copy_started = _timing_event(side)
            for name, value in named.items():
                self.buffers[name][offset : offset + value.shape[0]].copy_(value, non_blocking=True)
                # The caching allocator must not hand this memory to the next call before the
                # side stream has read it.
                value.record_stream(side)
            self.events.append(("copy", copy_started, _timing_event(side)))

    def finish(self) -> tuple[HostShard, float]:
        copied = torch.cuda.Event()
        copied.record(self.owner.side)
        buffers, rows, events = self.buffers or {}, self.rows, self.events
        arrays = {name: buffer[:rows].numpy() for name, buffer in buffers.items()}

        def device_seconds() -> dict[str, float]:
            seconds = {"generate": 0.0, "copy": 0.0}
            for stage, begin, end in events:
                seconds[stage] += begin.elapsed_time(end) / 1000
            return seconds

        return HostShard(
            self.index,
            arrays,
            wait=copied.synchronize,
            release=lambda: self.owner.give_back(buffers),
            device_seconds=device_seconds,
        ), 0.0


def _timing_event(stream: torch.cuda.Stream) -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream)
    return event


def _on_device(value: Any, device: torch.device) -> torch.Tensor:
    """A call's output as a tensor on the GPU, in the dtype its host array has (bfloat16, which
    NumPy lacks, widened to float32 as ``to_numpy`` widens it on the CPU path)."""
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(to_numpy(value))
    tensor = tensor.to(device)
    return tensor.float() if tensor.dtype == torch.bfloat16 else tensor
