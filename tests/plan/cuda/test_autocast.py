"""CUDA autocast's cast lists on the trace's fake CPU tensors, where they differ from the CPU's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from trainmedic.plan.cuda.autocast import CudaAutocast


def _dtypes_under(region):
    with FakeTensorMode():
        x = torch.randn(8, 16)
        w = torch.nn.Parameter(torch.randn(10, 16))
        target = torch.randint(0, 10, (8,))
        with region():
            logits = F.linear(x, w)
            norm = F.layer_norm(x, (16,))
            soft = logits.softmax(-1)
            log_probs = torch.log_softmax(logits, 1, dtype=logits.dtype)
            loss = F.cross_entropy(logits, target)
    return {
        "linear": logits.dtype,
        "layer_norm": norm.dtype,
        "softmax": soft.dtype,
        "log_softmax with its dtype": log_probs.dtype,
        "cross_entropy": loss.dtype,
    }


def test_cuda_policy_replaces_the_cpus_while_installed_and_only_then():
    cuda = CudaAutocast()
    with cuda:
        on_cuda = _dtypes_under(lambda: cuda.region(torch.bfloat16))
    on_cpu = _dtypes_under(lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    # CUDA: matmuls in bf16; layer_norm and softmax in fp32; a dtype given explicitly is kept.
    assert on_cuda == {
        "linear": torch.bfloat16,
        "layer_norm": torch.float32,
        "softmax": torch.float32,
        "log_softmax with its dtype": torch.bfloat16,
        "cross_entropy": torch.float32,
    }
    # The CPU's own lists are back once the trace ends: layer_norm and softmax stay in bf16 there.
    assert on_cpu["layer_norm"] == torch.float32 and on_cpu["softmax"] == torch.bfloat16


def test_a_weight_is_cast_once_per_region_and_the_cast_dropped_after():
    cuda = CudaAutocast()
    with cuda, FakeTensorMode():
        w = torch.nn.Parameter(torch.randn(10, 16))
        with cuda.region(torch.bfloat16):
            first = F.linear(torch.randn(8, 16), w)
            second = F.linear(torch.randn(8, 16), w)
            assert len(cuda._cache) == 1
            del first, second
        assert not cuda._cache


def test_binary_cross_entropy_raises_as_it_does_under_cuda_autocast():
    cuda = CudaAutocast()
    with cuda, FakeTensorMode(), cuda.region(torch.bfloat16):
        try:
            F.binary_cross_entropy(torch.rand(4), torch.rand(4))
        except RuntimeError as exc:
            assert "unsafe to autocast" in str(exc)
        else:
            raise AssertionError("binary_cross_entropy ran under CUDA autocast")
