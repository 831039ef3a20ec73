"""The dispatch hook that adds what the card's kernels allocate to a trace of CPU kernels.

Called after every op of the trace with the op's arguments and outputs: the kernels' own
workspaces and staging buffers go into the tracker as allocations of their own, transient (freed
when the kernel returns) or persistent (cuBLAS's, kept by the process).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainmedic.devices import Device
from trainmedic.plan.cuda import attention, blas, reduce
from trainmedic.plan.tracker import StorageTracker

_CONVS = {"convolution", "convolution_backward"}

#: Reductions run by gpu_reduce_kernel: name -> (accumulator bytes for a floating input, vt0);
#: None means the input's own element size (max/min keep the input's type).
_REDUCTIONS: dict[str, tuple[int | None, int]] = {
    "sum": (4, 4), "mean": (4, 4), "prod": (4, 4), "linalg_vector_norm": (4, 4), "norm": (4, 4),
    "amax": (None, 4), "amin": (None, 4),
    # A (value, index) pair: thrust::pair<acc, int64_t>.
    "argmax": (16, 4), "argmin": (16, 4),
    # Welford's running (mean, m2, n, nf), loaded two values at a time.
    "var": (16, 2), "std": (16, 2), "var_mean": (16, 2), "std_mean": (16, 2),
}


@dataclass
class CudaKernels:
    """A dispatch hook adding the target's own allocations to a trace of CPU kernels."""

    device: Device
    sdpa_calls: list[str] = field(default_factory=list)
    _workspaces: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self, tracker: StorageTracker, func, args, out, where: str) -> None:
        name = func.__name__.split(".")[0]
        if name in blas.MATMULS:
            self._gemm(tracker, name, args, where)
        elif name in _REDUCTIONS:
            self._reduction(tracker, func, name, args, where)
        elif name in _CONVS:
            tensors = [t for t in (*args, *(out if isinstance(out, (tuple, list)) else (out,))) if isinstance(t, torch.Tensor)]
            tracker.add_transient(max((t.untyped_storage().nbytes() for t in tensors), default=0), "cudnn workspace (estimate)", where)
        elif name == attention.CPU_FORWARD:
            query = args[0]
            kernel = attention.sdpa_kernel(self.device, query.dtype, int(query.shape[-1]))
            note = f"{where or 'scaled_dot_product_attention'}: {kernel} kernel on {self.device.key}"
            if note not in self.sdpa_calls:
                self.sdpa_calls.append(note)
        elif name == attention.CPU_BACKWARD:
            query = args[1]  # (grad_out, query, key, value, out, logsumexp, ...)
            if attention.sdpa_kernel(self.device, query.dtype, int(query.shape[-1])) == "flash":
                tracker.add_transient(attention.flash_dq_accumulator(query), "flash-attention dq accumulator", where)

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
        elif input.dtype == torch.float64:
            acc *= 2
        dims = _reduced_dims(func, args)
        staging, semaphores = reduce.buffers(reduce.reduction_of(input, dims, acc, vt0), self.device.sm_count, self.device.threads_per_sm)
        if staging:
            tracker.add_transients([staging, semaphores], "reduction staging buffer", where)


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
