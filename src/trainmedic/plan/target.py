"""What the target GPU does differently from the CPU kernels the step is traced with.

The trace runs CPU kernels on fake tensors; a GPU step allocates a little more, through the
same caching allocator that ``max_memory_allocated`` counts:

- cuBLAS keeps a workspace per handle and stream from the first matmul on (PyTorch's default
  ``CUBLAS_WORKSPACE_CONFIG`` is ``:4096:2:16:8``, 8.125 MiB; 32 MiB from Hopper on);
- ``scaled_dot_product_attention`` picks flash on sm80+ in half precision and the
  memory-efficient kernel otherwise; both keep O(B·H·S) state like the CPU flash kernel the trace
  sees, and flash's backward adds an fp32 ``dq`` accumulator of B·S·H·D (rounded to 128 rows);
- cuDNN convolutions take a workspace for the algorithm they pick at run time; the plan adds
  the larger of the op's input and output as a transient, a stated estimate;
- optimizers default to their ``foreach`` implementation on CUDA (whole-list temporaries), which
  the trace switches on because fake CPU tensors would take the per-tensor loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

from trainmedic.devices import Device
from trainmedic.plan.tracker import StorageTracker

CUBLAS_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
CUBLAS_WORKSPACE_HOPPER = 32 << 20

# aten op names as the dispatcher sees them (nn.Linear arrives as addmm/mm, Conv2d as convolution).
_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "_addmm_activation"}
_CONVS = {"convolution", "convolution_backward"}
_SDPA_CPU_BACKWARD = "_scaled_dot_product_flash_attention_for_cpu_backward"
_SDPA_CPU_FORWARD = "_scaled_dot_product_flash_attention_for_cpu"


def sdpa_kernel(device: Device, dtype: torch.dtype, head_dim: int) -> str:
    """The kernel ``scaled_dot_product_attention`` would pick on the target for these inputs."""
    if not device.is_gpu:
        return "cpu flash"
    capability = device.compute_capability or (0, 0)
    if capability >= (8, 0) and dtype in (torch.float16, torch.bfloat16) and head_dim <= 256:
        return "flash"
    return "memory-efficient"


@dataclass
class GpuSide:
    """A dispatch hook adding the target's own allocations to a trace of CPU kernels."""

    device: Device
    sdpa_calls: list[str] = field(default_factory=list)
    _workspace_done: bool = False

    def __call__(self, tracker: StorageTracker, func, args, out, where: str) -> None:
        name = func.__name__.split(".")[0]
        if name in _MATMULS and not self._workspace_done:
            self._workspace_done = True
            hopper = (self.device.compute_capability or (0, 0)) >= (9, 0)
            tracker.add_persistent(CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE, "cublas workspace", where)
        elif name in _CONVS:
            tensors = [t for t in (*args, *(out if isinstance(out, (tuple, list)) else (out,))) if isinstance(t, torch.Tensor)]
            tracker.add_transient(max((t.untyped_storage().nbytes() for t in tensors), default=0), "cudnn workspace (estimate)", where)
        elif name == _SDPA_CPU_FORWARD:
            query = args[0]
            kernel = sdpa_kernel(self.device, query.dtype, int(query.shape[-1]))
            note = f"{where or 'scaled_dot_product_attention'}: {kernel} kernel on {self.device.key}"
            if note not in self.sdpa_calls:
                self.sdpa_calls.append(note)
        elif name == _SDPA_CPU_BACKWARD:
            query = args[1]  # (grad_out, query, key, value, out, logsumexp, ...)
            batch, heads, seq, head_dim = (int(s) for s in query.shape)
            if sdpa_kernel(self.device, query.dtype, head_dim) == "flash":
                rows = (seq + 127) // 128 * 128
                dims = (head_dim + 31) // 32 * 32
                tracker.add_transient(batch * heads * rows * dims * 4, "flash-attention dq accumulator", where)


def use_foreach(optimizer: torch.optim.Optimizer) -> bool:
    """Switch an optimizer left on its default to ``foreach``, as it would run on CUDA."""
    changed = False
    for group in optimizer.param_groups:
        if "foreach" in group and group["foreach"] is None and not group.get("fused"):
            group["foreach"] = True
            changed = True
    return changed


class SdpaAsOnTarget(TorchFunctionMode):
    """Trace attention with dropout the way the target runs it.

    With ``dropout_p > 0`` the CPU takes SDPA's math path and materialises B·H·S² scores and a
    dropout mask; a GPU's flash and memory-efficient kernels apply dropout from an RNG seed and
    keep neither. So on a GPU target the call is traced without dropout, the memory it has there.
    """

    def __init__(self, notes: list[str]) -> None:
        super().__init__()
        self._notes = notes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.nn.functional.scaled_dot_product_attention:
            if len(args) > 4 and args[4]:
                args = (*args[:4], 0.0, *args[5:])
                self._note()
            elif kwargs.get("dropout_p"):
                kwargs["dropout_p"] = 0.0
                self._note()
        return func(*args, **kwargs)

    def _note(self) -> None:
        note = "attention dropout planned as the GPU kernels run it (an RNG seed, no B·H·S² mask)"
        if note not in self._notes:
            self._notes.append(note)
