"""``scaled_dot_product_attention`` on the card: which kernel it picks and what that kernel adds.

The trace runs the CPU's flash kernel, which keeps O(B·H·S) state like the GPU kernels; flash's
CUDA backward adds an fp32 ``dq`` accumulator of B·S·H·D (rows rounded to 128, the head
dimension to 32).
"""

from __future__ import annotations

import torch

from trainmedic.devices import Device

CPU_FORWARD = "_scaled_dot_product_flash_attention_for_cpu"
CPU_BACKWARD = "_scaled_dot_product_flash_attention_for_cpu_backward"


def sdpa_kernel(device: Device, dtype: torch.dtype, head_dim: int) -> str:
    """The kernel ``scaled_dot_product_attention`` would pick on the target for these inputs."""
    if not device.is_gpu:
        return "cpu flash"
    capability = device.compute_capability or (0, 0)
    if capability >= (8, 0) and dtype in (torch.float16, torch.bfloat16) and head_dim <= 256:
        return "flash"
    return "memory-efficient"


def flash_dq_accumulator(query: torch.Tensor) -> int:
    """Bytes of the fp32 ``dq`` accumulator flash attention's backward allocates."""
    batch, heads, seq, head_dim = (int(s) for s in query.shape)
    rows = (seq + 127) // 128 * 128
    dims = (head_dim + 31) // 32 * 32
    return batch * heads * rows * dims * 4
