"""The memory a batched call really takes at its peak, measured on a small real call.

Sizing used to trace the call under fake tensors. That needs no memory, but building a
``FakeTensorMode`` imports ``torch._dynamo``, ``torch.fx.experimental.symbolic_shapes``, sympy
and ``torch.distributed.fsdp``: 2 s on the 2-vCPU dev VM, 4-6 s of a 6.2 s job on an H200
(gpu-truth/h200-2026-11-26/generate_profile.txt), where the generating itself took a few
hundred milliseconds. A call of 8 and one of 64 real samples cost about 72 samples of the job
and measure the same thing:

* CPU: :class:`LiveBytes` counts the bytes of every storage the call's ops create while they
  live, the quantity the trace replayed (exact bytes; no allocator rounds on the host). Peaks
  of an IQ-sample generator agree with the trace's to the byte (87.8 KiB a sample at 128 IQ samples).
* CUDA: the caching allocator's own peak (``max_memory_allocated`` after
  ``reset_peak_memory_stats``), which includes its rounding and the kernels' workspaces that a
  trace had to model. This resets the process's peak statistics once, before the job.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from trainmedic.batch.params import Params
from trainmedic.batch.sizing import MEASURE_SIZES
from trainmedic.batch.vectorize import Vectorized
from trainmedic.data.sources.arrays import to_numpy

__all__ = ["LiveBytes", "call_peaks", "peak_bytes"]


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages made by ops run under it, alive now (``live``) and at most (``peak``).

    Storages made before entering (the inputs) are not counted: the peak is what one call adds.
    A storage's death is seen through a weak reference, the moment its last tensor is dropped.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, which
        # imports torch._dynamo (and sympy) on the first op: the 2 s this module exists to avoid.
        # Nothing here is compiled, so the wrapping buys nothing (torch's docstring of this hook).
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._count(value)
        return out

    def _count(self, tensor: torch.Tensor) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
            return
        if storage in self._seen:
            return  # a view of a storage already counted
        nbytes = storage.nbytes()
        self._seen[storage] = nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._freed, nbytes)

    def _freed(self, nbytes: int) -> None:
        self.live -= nbytes


def peak_bytes(call: Callable[[], Any], device: torch.device) -> int:
    """The peak memory ``call()`` adds on ``device``, its outputs included (they are alive at its end)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = call()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del out
        return max(0, int(peak))
    meter = LiveBytes()
    with meter:
        out = call()
    del out
    return meter.peak


def call_peaks(vf: Vectorized, columns: Params, device: torch.device, seed: int) -> dict[int, int] | None:
    """Peak bytes of real calls of MEASURE_SIZES samples (the first rows, repeated when there are
    fewer), outside any shard's seeded generator; None if the function fails on them."""
    twin = vf.without_fallback()
    rows = columns.rows(0, min(max(MEASURE_SIZES), columns.length))
    host = {name: to_numpy(value) for name, value in rows.items()}
    peaks = {}
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for count in MEASURE_SIZES:
                picks = np.arange(count) % len(next(iter(host.values())))
                inputs = {name: torch.as_tensor(value[picks]).to(device) for name, value in host.items()}
                peaks[count] = peak_bytes(functools.partial(twin, **inputs, seed=seed, start=0), device)
    except Exception:  # noqa: BLE001 - it ran on the first rows; the outputs alone then size the call
        return None
    return peaks
