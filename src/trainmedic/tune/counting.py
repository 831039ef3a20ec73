"""Count what one training step asks of the hardware: FLOPs and bytes moved.

A roofline needs two numbers per step: the floating-point work and the memory traffic. Both
are counted on fake tensors (``trainmedic.plan.trace.trace_step``), so a model that needs
40 GiB on an H100 is counted on a laptop without allocating anything.

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``: matmuls (``mm``, ``addmm``,
``bmm``, ``baddbmm``), convolutions and their backward, and the CUDA attention kernels; every
other op (elementwise, reductions, normalisation, the optimizer) counts zero, which is the
roofline convention — those ops are what makes a step bandwidth-bound, not what it computes.
The CPU attention kernel and oneDNN's LSTM layer are missing from torch's table and are added
here (a CPU trace would otherwise report an attention model's attention as free).

Bytes follow the unfused-kernel model: every op that moves data reads all its tensor inputs
and writes all its outputs, once, as passed (a slice costs its own elements, not its whole
storage). Views, aliases and allocations move nothing. Fusion (``torch.compile``) removes
intermediate traffic, so the model is an upper bound for compiled steps and close to exact for
eager ones.

The trace runs two steps; only the second is counted, because the first one also creates the
optimizer's state (``zeros_like`` of every parameter), which no later step repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from trainmedic.devices import Device, get_device
from trainmedic.errors import TuneError
from trainmedic.plan.trace import PRECISIONS, trace_step
from trainmedic.roofline.model import StepCost
from trainmedic.roofline.op_bytes import op_bytes

#: Ops whose kernels compute (FLOPs counted); the rest are "elementwise/other".
MATMUL_CONV = "matmul/conv"
ELEMENTWISE_OTHER = "elementwise/other"
STEP_PHASES = ("forward", "backward", "optimizer")

_aten = torch.ops.aten


def count_step(
    build: Callable[[int], Any], batch_size: int, precision: str = "fp32", device: Device | None = None
) -> StepCost:
    """FLOPs and bytes of one steady-state training step of ``build(batch_size)``.

    ``precision`` is a key of ``trainmedic.plan.trace.PRECISIONS`` (bf16/fp16 run under autocast,
    as the measured step will). ``device`` is the catalog entry traced for (default: the CPU);
    a GPU entry makes the trace take the GPU's paths where the planner models them.
    Raises PlanError when ``build`` cannot be traced (its message names the fix) and TuneError
    when the step could not run to its end on fake tensors: a partial count would understate
    the step, so none is returned.
    """
    if precision not in PRECISIONS:
        raise TuneError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise TuneError(f"batch size {batch_size!r} must be a positive integer.")
    device = device if device is not None else get_device("cpu")
    counter = FlopCounterMode(display=False, custom_mapping=_MISSING_FORMULAS)
    tally = _Tally(counter)
    # Entered outside the trace, the counter's dispatch mode sits below the trace's tracker
    # and above fake-tensor execution: it sees every op the tracker passes down.
    with counter:
        trace = trace_step(build, batch_size, device, precision, observe=tally.observe)
    if trace.incomplete:
        raise TuneError(
            f"cannot count the FLOPs and bytes of a step of {getattr(build, '__name__', 'build')}({batch_size}): "
            f"{trace.incomplete}. The roofline needs the whole step; make that op traceable (trainmedic plan "
            "shows the same stop) or tune without a roofline."
        )
    if tally.steps_seen < 2:
        raise TuneError(
            f"the traced training step of {getattr(build, '__name__', 'build')}({batch_size}) ran no "
            "forward operation, so it has no FLOPs or bytes to count."
        )
    by_op = dict(sorted(tally.bytes_by_op.items(), key=lambda item: -item[1]))
    return StepCost(
        batch_size=batch_size,
        precision=precision,
        flops=float(sum(tally.flops_by_phase.values())),
        bytes=float(sum(tally.bytes_by_phase.values())),
        flops_by_phase={p: float(tally.flops_by_phase.get(p, 0)) for p in STEP_PHASES},
        bytes_by_phase={p: float(tally.bytes_by_phase.get(p, 0)) for p in STEP_PHASES},
        bytes_by_kind={k: float(tally.bytes_by_kind.get(k, 0)) for k in (MATMUL_CONV, ELEMENTWISE_OTHER)},
        bytes_by_op={name: float(moved) for name, moved in by_op.items()},
        ops=tuple(tally.ops),
    )


class _Tally:
    """Per-op FLOPs and bytes of the second traced step, gathered from the trace's observer."""

    def __init__(self, counter: FlopCounterMode) -> None:
        self.counter = counter
        self.steps_seen = 0
        self._phase = "build"
        self._flops_so_far = 0
        self.flops_by_phase: dict[str, int] = {}
        self.bytes_by_phase: dict[str, int] = {}
        self.bytes_by_kind: dict[str, int] = {}
        self.bytes_by_op: dict[str, int] = {}
        self.ops: list[tuple[float, float]] = []

    def observe(self, tracker, func, args, outputs, where) -> None:
        # The flop counter sits below the tracker in the dispatch stack, so it has counted this
        # op by the time the tracker reports it: the op's FLOPs are the growth of the total.
        total = self.counter.get_total_flops()
        flops, self._flops_so_far = total - self._flops_so_far, total
        phase = tracker.phase
        if phase == "forward" and self._phase != "forward":
            self.steps_seen += 1
        self._phase = phase
        if self.steps_seen != 2 or phase not in STEP_PHASES:
            return
        moved = op_bytes(func, args, outputs)
        computes = flops > 0 or func.overloadpacket in self.counter.flop_registry
        kind = MATMUL_CONV if computes else ELEMENTWISE_OTHER
        name = func.__name__.split(".")[0]
        self.flops_by_phase[phase] = self.flops_by_phase.get(phase, 0) + flops
        self.bytes_by_phase[phase] = self.bytes_by_phase.get(phase, 0) + moved
        self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0) + moved
        if moved:
            self.bytes_by_op[name] = self.bytes_by_op.get(name, 0) + moved
        if moved or flops:
            self.ops.append((float(flops), float(moved)))


# --- FLOP formulas torch's table lacks ---------------------------------------------------------
# FlopCounterMode passes shapes, not tensors, to custom formulas (it wraps them in shape_wrapper).


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    # The CPU flash kernel does the same two batched matmuls as the CUDA ones torch counts.
    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_sdpa_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _rnn_tokens(input_shape) -> int:
    tokens = 1
    for size in input_shape[:-1]:
        tokens *= size
    return tokens


def _mkldnn_rnn_flop(input_shape, w_ih_shape, w_hh_shape, *args, out_shape=None, **kwargs) -> int:
    # One LSTM layer: every time step of every sample multiplies [x, h] by the stacked gate
    # weights (4H x I and 4H x H); the gates' elementwise math is not counted, as elsewhere.
    weights = w_ih_shape[0] * w_ih_shape[1] + w_hh_shape[0] * w_hh_shape[1]
    return 2 * _rnn_tokens(input_shape) * weights


def _mkldnn_rnn_backward_flop(input_shape, w_ih_shape, w_hh_shape, *args, out_shape=None, **kwargs) -> int:
    # Gradients of the inputs and of the weights: two matmuls the size of the forward one.
    return 2 * _mkldnn_rnn_flop(input_shape, w_ih_shape, w_hh_shape)


_MISSING_FORMULAS = {
    getattr(_aten, name): formula
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", _cpu_sdpa_flop),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _cpu_sdpa_backward_flop),
        ("mkldnn_rnn_layer", _mkldnn_rnn_flop),
        ("mkldnn_rnn_layer_backward", _mkldnn_rnn_backward_flop),
    )
    if hasattr(_aten, name)  # absent from a build without them: nothing to count then
}
