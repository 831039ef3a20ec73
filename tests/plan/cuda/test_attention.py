"""Attention planned through the kernel the card picks, with that kernel's layout and buffers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainmedic.devices import get_device
from trainmedic.plan import plan_memory
from trainmedic.plan.cuda import attention


def test_kernel_choice_follows_the_card_and_the_inputs():
    h200, a100, t4 = get_device("h200"), get_device("a100-80gb"), get_device("t4")
    assert attention.sdpa_kernel(h200, torch.bfloat16, 128) == attention.CUDNN
    assert attention.sdpa_kernel(h200, torch.bfloat16, 128, masked=True) == attention.EFFICIENT
    assert attention.sdpa_kernel(a100, torch.bfloat16, 128) == attention.FLASH
    assert attention.sdpa_kernel(h200, torch.float32, 128) == attention.EFFICIENT
    assert attention.sdpa_kernel(t4, torch.float16, 64) == attention.EFFICIENT
    assert attention.sdpa_kernel(t4, torch.bfloat16, 64) == attention.MATH  # no bf16 kernels before sm80
    assert attention.sdpa_kernel(h200, torch.float32, 66) == attention.MATH


def test_cudnn_backward_workspace_is_the_measured_one():
    # Recorded on an H200 (tests/plan/gpu_truth, benchmarks/plan_zoo.py's transformer in bf16).
    query = torch.empty(16, 4, 256, 64, dtype=torch.bfloat16, device="meta")
    assert attention.backward_buffers(attention.CUDNN, query, query) == [4_260_096]


def _mha(batch_size):
    layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    return dict(
        model=layer, inputs=torch.randn(batch_size, 128, 256), optimizer=lambda p: torch.optim.AdamW(p)
    )


@pytest.mark.slow
def test_multihead_attention_copies_the_kernels_output_as_the_card_does():
    # CUDA's kernels write (B, S, H, D): MultiheadAttention's permute(2, 0, 1, 3).contiguous()
    # copies it, which the CPU kernel (writing in the query's layout) never needs.
    plan = plan_memory(_mha, 8, device="h200")
    assert any("memory-efficient kernel on h200" in n for n in plan.notes)
    assert any("attention dropout planned as the GPU kernels run it" in n for n in plan.notes)
