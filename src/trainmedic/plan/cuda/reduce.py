"""The staging buffer a CUDA reduction allocates when it splits one output across blocks.

``sum``, ``mean``, ``amax``, ``var`` and the other reductions run ATen's ``gpu_reduce_kernel``
(``aten/src/ATen/native/cuda/Reduce.cuh``). When there are too few outputs to fill the card, it
splits each output's inputs over ``ctas_per_output`` blocks, which meet in a global staging
buffer of ``sizeof(acc) x outputs x ctas x block width x vector width`` bytes, plus an int
semaphore per block column. A linear layer's bias gradient is such a reduction: on an H200 the
4096-wide layer of a batch of 4096 takes a 128 MiB buffer (twice its input) for a 16 KiB result.
The CPU kernels the trace runs allocate nothing of the kind.

The geometry follows ``setReduceConfig`` over the reduction's ``TensorIterator``: dimensions
sorted reduced-first then by stride, and coalesced where contiguous. What it needs of the card is
its SM count and threads per SM; both are in the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import torch

#: ``mnt_wrapper<T>::MAX_NUM_THREADS``: 512 for every real type the planner sees.
MAX_NUM_THREADS = 512
WARP_SIZE = 32
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256


@dataclass(frozen=True)
class Reduction:
    """What ``gpu_reduce_kernel`` is given: the iterator's dimensions, fastest first."""

    shape: tuple[int, ...]
    input_strides: tuple[int, ...]  # bytes
    num_reduce_dims: int
    acc_bytes: int  # sizeof(arg_t): the accumulator, e.g. float for a bf16 sum
    item_bytes: int  # sizeof(scalar_t) of the input
    vt0: int = 4  # values a thread loads at once (2 for Welford's var/std)


def buffers(reduction: Reduction, sm_count: int, threads_per_sm: int) -> tuple[int, int]:
    """``(staging buffer, semaphores)`` bytes the kernel allocates, ``(0, 0)`` when it needs none."""
    shape, strides, nred = reduction.shape, reduction.input_strides, reduction.num_reduce_dims
    numel = prod(shape)
    if numel == 0:
        return 0, 0
    num_outputs = prod(shape[nred:])
    inputs_per_output = numel // num_outputs
    ndim = len(shape)
    if ndim > 0:
        on_fastest = nred == ndim or strides[0] < strides[nred]
        if on_fastest:
            dim0, dim1, fastest = inputs_per_output, num_outputs, strides[0]
        else:
            dim0, dim1, fastest = num_outputs, inputs_per_output, strides[nred]
    else:
        on_fastest, dim0, dim1, fastest = True, 1, 1, reduction.item_bytes
    output_vec = 1
    if fastest == reduction.item_bytes:
        if on_fastest and dim0 >= 128 and nred == 1:
            dim0 //= reduction.vt0  # vectorised input loads
        elif not on_fastest:
            output_vec = _output_vec_size(shape, strides, nred, reduction.item_bytes)
            dim0 //= output_vec
    max_threads = MAX_NUM_THREADS // output_vec
    width, height = _block(dim0, dim1, max_threads)
    step_input, step_output = 1, 1
    if ndim == 0 or on_fastest:
        step_input *= width
    else:
        step_output *= width
    values_per_thread = -(-inputs_per_output // step_input)
    split_across_warps = values_per_thread >= min(height * 16, MAX_VALUES_PER_THREAD)
    if split_across_warps:
        step_input *= height
    else:
        step_output *= height
    grid_x = -(-(num_outputs // output_vec) // step_output)
    target_grid = sm_count * (threads_per_sm // (width * height))
    values_per_thread = -(-inputs_per_output // step_input)
    if not (split_across_warps and values_per_thread >= MAX_VALUES_PER_THREAD and grid_x <= target_grid):
        return 0, 0
    ctas = max(
        -(-values_per_thread // MAX_VALUES_PER_THREAD),
        min(-(-target_grid // grid_x), -(-values_per_thread // MIN_VALUES_PER_THREAD)),
    )
    if ctas <= 1:
        return 0, 0
    staging = reduction.acc_bytes * num_outputs * ctas
    if not on_fastest:  # no block-x reduction: every lane of the block keeps its own partials
        staging *= width * output_vec
    return staging, 4 * grid_x


def _block(dim0: int, dim1: int, max_threads: int) -> tuple[int, int]:
    def pow2(n: int) -> int:
        cap = max_threads
        while cap > 1 and n < cap:
            cap //= 2
        return cap

    dim0_pow2, dim1_pow2 = pow2(dim0), pow2(dim1)
    width = min(dim0_pow2, WARP_SIZE)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    return width, height


def _output_vec_size(shape, strides, nred, item_bytes) -> int:
    vec = 4
    # A fresh allocation is aligned, so the pointer never limits the vector width here.
    for n, unit in [(shape[nred], 1)] + [(s, item_bytes) for i, s in enumerate(strides) if i != nred]:
        while vec > 1 and n % (vec * unit):
            vec //= 2
    return vec


def reduction_of(input: torch.Tensor, dims: list[int] | None, acc_bytes: int, vt0: int = 4) -> Reduction:
    """The iterator ``TensorIterator`` builds for reducing ``input`` over ``dims`` (None: all)."""
    ndim = input.dim()
    if ndim == 0:  # a scalar: nothing to split
        return Reduction((), (), 0, acc_bytes, input.element_size(), vt0)
    reduced = set(range(ndim)) if dims is None or len(dims) == 0 else {d % ndim for d in dims}
    item = input.element_size()
    sizes, in_strides = list(input.shape), [s * item for s in input.stride()]
    # The output is contiguous over the kept dimensions and broadcast (stride 0) over the reduced.
    out_strides, running = [0] * ndim, acc_bytes
    for d in reversed(range(ndim)):
        if d not in reduced:
            out_strides[d] = running
            running *= sizes[d]
    order = _sorted_dims(sizes, out_strides, in_strides)
    shape = [sizes[d] for d in order]
    operands = [[out_strides[d] for d in order], [in_strides[d] for d in order]]
    shape, operands = _coalesced(shape, operands)
    nred = sum(1 for s in operands[0] if s == 0)
    return Reduction(tuple(shape), tuple(operands[1]), nred, acc_bytes, item, vt0)


def _sorted_dims(sizes: list[int], out_strides: list[int], in_strides: list[int]) -> list[int]:
    """``TensorIteratorBase::reorder_dimensions``: reduced dimensions first, then by stride."""

    def should_swap(d0: int, d1: int) -> int:
        for is_output, strides in ((True, out_strides), (False, in_strides)):
            s0, s1 = strides[d0], strides[d1]
            if is_output and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if sizes[d0] > sizes[d1]:
                return 1
        return 0

    perm = list(reversed(range(len(sizes))))
    for i in range(1, len(perm)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[d0], perm[d1])
            if comparison > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif comparison < 0:
                break
    return perm


def _coalesced(shape: list[int], operands: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """``TensorIteratorBase::coalesce_dimensions``: merge neighbours that are one run of memory."""
    if len(shape) <= 1:
        return shape, operands
    shape, operands = list(shape), [list(o) for o in operands]
    prev = 0
    for dim in range(1, len(shape)):
        mergeable = (
            shape[prev] == 1 or shape[dim] == 1 or all(shape[prev] * o[prev] == o[dim] for o in operands)
        )
        if mergeable:
            if shape[prev] == 1:
                for o in operands:
                    o[prev] = o[dim]
            shape[prev] *= shape[dim]
        else:
            prev += 1
            if prev != dim:
                for o in operands:
                    o[prev] = o[dim]
                shape[prev] = shape[dim]
    return shape[: prev + 1], [o[: prev + 1] for o in operands]
