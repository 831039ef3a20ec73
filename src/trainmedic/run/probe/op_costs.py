"""FLOPs and bytes of every aten op a live step runs, for the run's roofline verdict.

A stack sampler sees the host; on a GPU the host only waits while the kernels run, so "the
model's compute" cannot say whether those kernels were limited by arithmetic or by memory
traffic. The op counts can: each op's FLOPs (torch's ``FlopCounterMode``) and bytes (the
unfused-kernel model of ``trainmedic.roofline.op_bytes``, the one ``trainmedic tune``
counts with) place it under the device's compute roof or its bandwidth slope
(``diagnose/intensity.py``).

It runs only during the op census's warm-up steps and only on CUDA runs (the session decides),
so steady-state steps never carry its cost: a Python call per aten op, including backward's
(the dispatch mode travels with autograd to its device threads).

``trainmedic.roofline`` (shared with tune, below both) is imported lazily, when a CUDA run's
census starts: it imports torch, which a run of a script that never imports torch should not pay.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: Distinct (op, precision, FLOPs, bytes) kinds kept; a step of a few thousand ops has a few
#: hundred (ops repeat per layer with the same shapes). Past it, ops are tallied per name.
MAX_KINDS = 4096

# aten ops whose fp32 inputs run on TF32 tensor cores when torch allows it.
_MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm"})
_CONVS = frozenset({"convolution", "convolution_backward", "cudnn_convolution", "_convolution"})


@dataclass
class OpCosts:
    """What the counted steps asked of the hardware, op kind by op kind."""

    #: (aten op name, precision key of ``trainmedic.devices`` peaks, FLOPs, bytes) -> how many
    #: times it ran over ``steps``.
    ops: dict[tuple[str, str, float, float], int] = field(default_factory=dict)
    steps: int = 0

    @property
    def flops(self) -> float:
        return sum(f * n for (_, _, f, _), n in self.ops.items())

    @property
    def bytes(self) -> float:
        return sum(b * n for (_, _, _, b), n in self.ops.items())


class OpCostCounter:
    """A dispatch mode that tallies each op's FLOPs and bytes while it is entered."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, float, float]] = Counter()
        self.steps = 0
        self._modes: list[Any] = []
        self.failed: str | None = None

    def start(self) -> None:
        if self._modes:
            return
        try:
            import torch
            from torch.utils._python_dispatch import TorchDispatchMode
            from torch.utils.flop_counter import FlopCounterMode

            from trainmedic.roofline.op_bytes import op_bytes
        except Exception as exc:  # noqa: BLE001 - no count is better than a broken run
            self.failed = f"{type(exc).__name__}: {exc}"
            return
        counter = FlopCounterMode(display=False)
        tally = self

        class _Tally(TorchDispatchMode):
            last = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                # The flop counter sits below in the dispatch stack: it has counted this op.
                total = counter.get_total_flops()
                flops, _Tally.last = total - _Tally.last, total
                try:
                    moved = op_bytes(func, args, out)
                except Exception:  # noqa: BLE001 - an op the byte model cannot read counts no bytes
                    moved = 0
                if flops or moved:
                    tally._add(func.__name__.split(".")[0], _precision(torch, func, args), flops, moved)
                return out

        try:
            counter.__enter__()
            self._modes.append(counter)
            mode = _Tally()
            mode.__enter__()
            self._modes.append(mode)
        except Exception as exc:  # noqa: BLE001
            self.failed = f"{type(exc).__name__}: {exc}"
            self.stop()

    def stop(self, steps: int = 0) -> None:
        while self._modes:
            mode = self._modes.pop()
            # The user's code may have left another mode on top: no count beats a broken run.
            with contextlib.suppress(Exception):
                mode.__exit__(None, None, None)
        if steps:
            self.steps = steps

    def _add(self, name: str, precision: str, flops: float, moved: float) -> None:
        key = (name, precision, float(flops), float(moved))
        if key not in self.counts and len(self.counts) >= MAX_KINDS:
            key = (name, precision, 0.0, 0.0)  # overflow: keep the op, lose its size (rare)
        self.counts[key] += 1

    def snapshot(self) -> OpCosts:
        return OpCosts(dict(self.counts), self.steps)


def _precision(torch: Any, func: Any, args: tuple) -> str:
    """The catalog's precision key for the op's first floating-point tensor input."""
    dtype = None
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            dtype = arg.dtype
            break
        if (
            isinstance(arg, (list, tuple))
            and arg
            and isinstance(arg[0], torch.Tensor)
            and arg[0].is_floating_point()
        ):
            dtype = arg[0].dtype
            break
    if dtype is torch.bfloat16:
        return "bf16"
    if dtype is torch.float16:
        return "fp16"
    if dtype is torch.float32:
        name = func.__name__.split(".")[0]
        if name in _MATMULS and torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
        if name in _CONVS and torch.backends.cudnn.allow_tf32:
            return "tf32"
    return "fp32"
