"""The dispatch hook that adds what the card's kernels allocate to a trace of CPU kernels.

Called after every op of the trace with the op's arguments and outputs: the kernels' own
workspaces and staging buffers go into the tracker as allocations of their own, transient (freed
when the kernel returns) or persistent (cuBLAS's, kept by the process).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from trainmedic.devices import Device
from trainmedic.plan.cuda import attention, blas, conv, reduce
from trainmedic.plan.tracker import StorageTracker

_CONVS = {"convolution", "convolution_backward"}

#: Reductions run by gpu_reduce_kernel: name -> (accumulator bytes for a floating input, vt0);
#: None means the input's own element size (max/min keep the input's type).
_REDUCTIONS: dict[str, tuple[int | None, int]] = {
    "sum": (4, 4),
    "mean": (4, 4),
    "prod": (4, 4),
    "linalg_vector_norm": (4, 4),
    "norm": (4, 4),
    "amax": (None, 4),
    "amin": (None, 4),
    # A (value, index) pair: thrust::pair<acc, int64_t>.
    "argmax": (16, 4),
    "argmin": (16, 4),
    # Welford's running (mean, m2, n, nf), loaded two values at a time.
    "var": (16, 2),
    "std": (16, 2),
    "var_mean": (16, 2),
    "std_mean": (16, 2),
}


@dataclass
class CudaKernels:
    """A dispatch hook adding the target's own allocations to a trace of CPU kernels."""

    device: Device
    sdpa_calls: list[str] = field(default_factory=list)
    #: Each convolution pass planned, with the sid of its workspace (None: it took none).
    conv_passes: list[tuple[int | None, conv.ConvPass]] = field(default_factory=list)
    _conv_hows: dict[tuple[str, int], str] = field(default_factory=dict)
    #: What the hook could not model, as plan.confidence lists its reasons.
    unmodelled: list[str] = field(default_factory=list)
    _workspaces: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self, tracker: StorageTracker, func, args, out, where: str) -> None:
        name = func.__name__.split(".")[0]
        try:
            self._dispatch(tracker, func, name, args, out, where)
        except Exception as exc:  # noqa: BLE001 - a gap in this model is not the user's error
            # The step goes on with the op's own tensors; the plan says what it did not model.
            gap = f"the card's own buffers of {name} are not modelled ({type(exc).__name__}: {exc})"
            if gap not in self.unmodelled:
                self.unmodelled.append(gap)

    def _dispatch(self, tracker: StorageTracker, func, name: str, args, out, where: str) -> None:
        if name in blas.MATMULS:
            self._gemm(tracker, name, args, where)
        elif name in _REDUCTIONS:
            self._reduction(tracker, func, name, args, where)
        elif name == "_softmax_backward_data":
            # SoftMax.cu's backward computes ``grad * output`` into a temporary before its kernel:
            # output-shaped, whatever the gradient's strides (an expanded scalar's included).
            grad, output = args[0], args[1]
            itemsize = torch.promote_types(grad.dtype, output.dtype).itemsize
            tracker.add_transient(output.numel() * itemsize, "softmax backward grad*output", where)
        elif name in _CONVS:
            self._convolution(tracker, name, args, out, where)
        elif name == "logsumexp":
            self._logsumexp(tracker, func, args, where)
        elif name == "embedding_dense_backward":
            tracker.add_transients(
                _embedding_backward_buffers(args[1].numel(), int(args[0].shape[-1])),
                "embedding backward sort and segment buffers",
                where,
            )
        elif name in attention.FORWARD_OPS:
            kernel = attention.FORWARD_OPS[name]
            tracker.add_transients(
                attention.forward_workspace(kernel), f"{kernel} attention workspace", where
            )
            note = f"{where or 'scaled_dot_product_attention'}: {kernel} kernel on {self.device.key}"
            if note not in self.sdpa_calls:
                self.sdpa_calls.append(note)
        elif name in attention.BACKWARD_OPS:
            kernel = attention.BACKWARD_OPS[name]
            grad_out, query = args[0], args[1]  # (grad_out, query, key, value, ...)
            tracker.add_kernel_buffers(
                attention.backward_buffers(kernel, grad_out, query),
                f"{kernel} attention backward buffers",
                where,
            )

    @property
    def conv_sources(self) -> dict[str, int]:
        """How many distinct convolution passes took a "measured", "scaled" or "estimated" workspace."""
        counts: dict[str, int] = {}
        for how in self._conv_hows.values():
            counts[how] = counts.get(how, 0) + 1
        return counts

    def _convolution(self, tracker: StorageTracker, name: str, args: tuple, out, where: str) -> None:
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        for conv_pass, estimate in conv.passes_of(name, args, out):
            nbytes, how = conv.workspace(self.device.key, conv_pass, estimate)
            self._conv_hows[(conv_pass.key(), conv_pass.batch)] = how
            # Backward allocates the input gradient, runs the data pass, allocates the weight
            # gradient, runs the filter pass, then reduces the bias gradient.
            produced = {conv.BACKWARD_DATA: 0, conv.BACKWARD_FILTER: 1}.get(conv_pass.kind)
            after = (
                tracker.sid_of(outputs[produced])
                if produced is not None and outputs[produced] is not None
                else None
            )
            if nbytes == 0:
                self.conv_passes.append((None, conv_pass))
            for sid in tracker.add_transients(
                [nbytes], f"cudnn {conv_pass.kind} workspace ({how})", where, after=after
            ):
                self.conv_passes.append((sid, conv_pass))
        if name == "convolution_backward" and len(outputs) > 2 and outputs[2] is not None:
            # The bias gradient is a reduction of grad_output over every dimension but channels.
            grad_output = args[0]
            dims = [d for d in range(grad_output.dim()) if d != 1]
            self._reduce(
                tracker, reduce.reduction_of(grad_output, dims, _float_acc(grad_output.dtype)), where
            )

    def _logsumexp(self, tracker: StorageTracker, func, args: tuple, where: str) -> None:
        # ReduceOps.cpp: maxes = amax(self, dims, keepdim=True), then sum((self - maxes).exp_())
        # into the result: an input-sized temporary the CPU's fake kernel never shows.
        input = args[0]
        if input.dim() == 0:
            return
        dims = _reduced_dims(func, args)
        reduced = [d % input.dim() for d in dims] if dims else list(range(input.dim()))
        maxes = input.element_size() * max(
            1, input.numel() // max(1, math.prod(input.shape[d] for d in reduced))
        )
        self._reduce(tracker, reduce.reduction_of(input, dims, input.element_size()), where)  # amax
        staging = reduce.buffers(
            reduce.reduction_of(input, dims, _float_acc(input.dtype)),
            self.device.sm_count,
            self.device.threads_per_sm,
        )
        tracker.add_transients(
            [maxes, input.numel() * input.element_size(), *(b for b in staging if b)],
            "logsumexp max, shifted copy and sum",
            where,
        )

    def _gemm(self, tracker: StorageTracker, name: str, args: tuple, where: str) -> None:
        # cuBLAS handles are per thread, and each handle gets its own workspaces: backward runs
        # on autograd's device thread, so it takes a second set (seen on an H200: a second 32 MiB
        # at the first matmul of the backward).
        thread = "autograd" if tracker.phase == "backward" else "main"
        if ("cublas", thread) not in self._workspaces:
            self._workspaces.add(("cublas", thread))
            tracker.add_persistent(blas.cublas_workspace(self.device), "cublas workspace", where)
        if ("cublaslt", thread) not in self._workspaces and blas.uses_cublaslt(name, args):
            self._workspaces.add(("cublaslt", thread))
            tracker.add_persistent(blas.CUBLASLT_WORKSPACE, "cublasLt workspace", where)

    def _reduction(self, tracker: StorageTracker, func, name: str, args: tuple, where: str) -> None:
        input = args[0] if args else None
        if not isinstance(input, torch.Tensor) or not input.is_floating_point():
            return
        acc, vt0 = _REDUCTIONS[name]
        if acc is None:
            acc = input.element_size()
        elif acc == 4:  # a float accumulator, a double one for float64
            acc = _float_acc(input.dtype)
        self._reduce(tracker, reduce.reduction_of(input, _reduced_dims(func, args), acc, vt0), where)

    def _reduce(self, tracker: StorageTracker, reduction: reduce.Reduction, where: str) -> None:
        staging, semaphores = reduce.buffers(reduction, self.device.sm_count, self.device.threads_per_sm)
        if staging:
            tracker.add_transients([staging, semaphores], "reduction staging buffer", where)


def _embedding_backward_buffers(indices: int, dim: int) -> list[int]:
    """EmbeddingBackwardKernel.cu: sorted and original indices, segment offsets, partials per
    segment and their offsets (int64 per index), partial-segment offsets and the fp32
    per-partial-segment gradient, for up to indices / NROWS_PER_THREAD (10) + indices partial
    segments (seen on an H200: 9,227,264 B for 16,384 indices of width 128)."""
    partials = indices // 10 + indices
    return [8 * indices] * 5 + [8 * partials, 4 * partials * dim]


def _float_acc(dtype: torch.dtype) -> int:
    """``acc_type`` of a floating reduction: float for half, bfloat16 and float, double for double."""
    return 8 if dtype == torch.float64 else 4


def _reduced_dims(func, args: tuple) -> list[int] | None:
    """The dims an aten reduction overload reduces over; None for all of them."""
    schema = func._schema.arguments
    for index, argument in enumerate(schema[1:], start=1):
        if argument.name == "dim":
            value = args[index] if index < len(args) else None
            if value is None:
                return None
            return [value] if isinstance(value, int) else list(value)
    return None
