"""``scaled_dot_product_attention`` as the card runs it: the kernel it picks, traced through that
kernel's own op, and what the kernel allocates inside.

The CPU runs its own flash kernel, whose output follows the query's memory layout; CUDA's
kernels write (B, S, H, D) whatever the query's layout is, so ``nn.MultiheadAttention``'s
``permute(2, 0, 1, 3).contiguous()`` copies on the card and not on the CPU. Tracing the CUDA
op itself (its meta kernel runs on fake CPU tensors, forward and backward) gives the card's
tensors, layouts and saved state; the kernels' internal buffers are added by ``kernels``.

Kernel choice follows ``sdp_utils.cpp``: cuDNN first on sm90 (H100/H200), then flash, the
memory-efficient kernel, and the math fallback that materialises B·H·S² scores.
"""

from __future__ import annotations

import torch

from trainmedic.devices import Device

CUDNN, FLASH, EFFICIENT, MATH = "cudnn", "flash", "memory-efficient", "math"
#: The aten ops of the CUDA kernels (forward, backward), as the dispatcher names them.
FORWARD_OPS = {
    "_scaled_dot_product_cudnn_attention": CUDNN,
    "_scaled_dot_product_flash_attention": FLASH,
    "_scaled_dot_product_efficient_attention": EFFICIENT,
}
BACKWARD_OPS = {f"{name}_backward": kernel for name, kernel in FORWARD_OPS.items()}
_HALF = (torch.float16, torch.bfloat16)


def sdpa_kernel(
    device: Device, dtype: torch.dtype, head_dim: int, masked: bool = False, dims: int = 4
) -> str:
    """The kernel ``scaled_dot_product_attention`` picks on the target for these inputs."""
    if not device.is_gpu:
        return "cpu flash"
    if dims != 4:  # every fused kernel takes (B, H, S, D)
        return MATH
    capability = device.compute_capability or (0, 0)
    cudnn = capability >= (9, 0) and dtype in _HALF and head_dim <= 128 and head_dim % 8 == 0 and not masked
    flash = capability >= (8, 0) and dtype in _HALF and head_dim <= 256 and head_dim % 8 == 0 and not masked
    efficient = (
        dtype == torch.float32 or dtype == torch.float16 or (dtype == torch.bfloat16 and capability >= (8, 0))
    ) and head_dim % (4 if dtype == torch.float32 else 8) == 0
    # sm90 prefers cuDNN's fused attention (seen on an H200 with torch 2.11: a cuDNN workspace in
    # backward, no flash accumulator); elsewhere cuDNN comes after the math fallback.
    order = (
        [(CUDNN, cudnn), (FLASH, flash), (EFFICIENT, efficient)]
        if capability == (9, 0)
        else [(FLASH, flash), (EFFICIENT, efficient)]
    )
    return next((name for name, ok in order if ok), MATH)


def attention(
    kernel: str,
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    """The attention output as ``kernel``'s own op computes it (and autograd saves for it)."""
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if kernel == CUDNN:
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, None, grad, dropout_p, is_causal, False, scale=scale
        )[0]
    if kernel == FLASH:
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale
        )[0]
    if kernel == EFFICIENT:
        bias = (
            attn_mask
            if attn_mask is None or attn_mask.dtype != torch.bool
            else torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(
                attn_mask.logical_not(), float("-inf")
            )
        )
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, grad, dropout_p, is_causal, scale=scale
        )[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]


def backward_buffers(kernel: str, grad_out: torch.Tensor, query: torch.Tensor) -> list:
    """What the kernel's backward takes and gives back inside itself, as a ``StorageTracker``
    buffer script (sizes, and ``("free", i)`` for the i-th):

    - flash (FA2 ``mha_bwd``): ``softmax_d`` (B, H, S↑128) and ``dq_accum`` (B, S↑128, H, D↑32), fp32;
    - cuDNN: one workspace of an fp32 dQ accumulator and row sums plus 256 bytes (measured on an
      H200, cuDNN 9: 4,260,096 B for B=16, H=4, S=256, D=64);
    - memory-efficient (``_efficient_attention_backward``): a contiguous copy of a strided
      gradient, ``delta = (grad_out * out).sum(-1)`` made through an fp32 product, and in fp32 a
      dQ accumulator workspace (measured on an H200: B·S·H·D·4 + 8 KiB for B=2, H=16, S=1024, D=128).
    """
    batch, heads, seq, head_dim = (int(s) for s in query.shape)  # a fused kernel's query is 4-D
    if kernel == FLASH:
        rows = (seq + 127) // 128 * 128
        return [batch * heads * rows * 4, batch * rows * heads * ((head_dim + 31) // 32 * 32) * 4]
    if kernel == CUDNN:
        return [batch * heads * seq * head_dim * 4 + batch * heads * seq * 4 + 256]
    if kernel == EFFICIENT:
        elements = batch * heads * seq * head_dim
        copy = 0 if grad_out.transpose(1, 2).is_contiguous() else elements * grad_out.element_size()
        rows = batch * heads * seq * 4
        script = [copy, elements * 4, rows, ("free", 1), rows, ("free", 2)]
        if query.dtype == torch.float32:
            script.append(elements * 4 + 8192)
        return script
    return []


def forward_workspace(kernel: str) -> list[int]:
    """cuDNN's forward takes a 256-byte workspace (measured on an H200)."""
    return [256] if kernel == CUDNN else []
