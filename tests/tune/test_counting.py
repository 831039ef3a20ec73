"""``count_step``: FLOPs and bytes of one steady-state training step, counted on fake tensors.

FLOPs are checked against closed forms (a matmul of m x k by k x n is 2mkn, as
torch.utils.flop_counter counts it), bytes against the unfused-kernel model worked out op by op
for a single matmul layer; the batch-size behaviour that a roofline verdict rests on (an MLP
reuses its weights more as the batch grows, a thin 3-D conv stack does not) is checked as such.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainmedic.devices import get_device
from trainmedic.errors import PlanError, TuneError
from trainmedic.roofline.model import StepCost
from trainmedic.tune.counting import ELEMENTWISE_OTHER, MATMUL_CONV, count_step

D = 128


def mlp(batch_size: int, layers: int = 3) -> dict:
    model = nn.Sequential(*[nn.Linear(D, D) for _ in range(layers)])
    return {
        "model": model,
        "inputs": torch.randn(batch_size, D),
        "optimizer": lambda p: torch.optim.AdamW(p, lr=1e-3),
    }


def one_matmul(batch_size: int, d: int = 32) -> dict:
    return {"model": nn.Linear(d, d, bias=False), "inputs": torch.randn(batch_size, d)}


def thin_conv3d(batch_size: int) -> dict:
    model = nn.Sequential(
        nn.Conv3d(4, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.Conv3d(8, 8, 3, padding=1), nn.ReLU()
    )
    return {
        "model": model,
        "inputs": torch.randn(batch_size, 4, 12, 12, 12),
        "optimizer": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    }


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 16).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v)


def attention(batch_size: int) -> dict:
    return {"model": Attention(), "inputs": torch.randn(batch_size, 32, 64)}


def test_mlp_flops_are_the_matmuls_of_forward_and_backward():
    b = 8
    cost = count_step(mlp, b)
    layer = 2 * b * D * D  # one (b x D) @ (D x D) matmul
    # Forward: one addmm per layer (the bias add is not counted). Backward: the weight's
    # gradient per layer, and the input's gradient for every layer but the first, whose
    # input needs none.
    assert cost.flops_by_phase == {"forward": 3 * layer, "backward": (3 + 2) * layer, "optimizer": 0.0}
    assert cost.flops == 8 * layer
    assert cost.batch_size == b and cost.precision == "fp32"


def test_one_matmul_layer_moves_what_each_unfused_kernel_reads_and_writes():
    b, d, f32 = 4, 32, 4
    cost = count_step(one_matmul, b)
    forward_mm = f32 * (b * d + d * d + b * d)  # reads x and W, writes y
    mean = f32 * (b * d + 1)
    ones_like = f32 * 1  # the loss's gradient: written, its input is only a shape
    div = f32 * (b * d + b * d)  # d(mean)/dy spread over y
    weight_grad_mm = f32 * (b * d + b * d + d * d)  # reads dy and x, writes dW
    assert cost.bytes == forward_mm + mean + ones_like + div + weight_grad_mm
    assert cost.bytes_by_kind == {
        MATMUL_CONV: forward_mm + weight_grad_mm,
        ELEMENTWISE_OTHER: mean + ones_like + div,
    }
    assert cost.bytes_by_op == {
        "mm": forward_mm + weight_grad_mm,
        "div": div,
        "mean": mean,
        "ones_like": ones_like,
    }
    assert cost.top_ops(1) == [("mm", (forward_mm + weight_grad_mm) / cost.bytes)]


def test_only_the_second_step_is_counted():
    # The first step also creates AdamW's state (zeros_like of every parameter): it would add
    # bytes no later step moves.
    cost = count_step(mlp, 4)
    assert "zeros_like" not in cost.bytes_by_op
    assert cost.bytes_by_phase["optimizer"] > 0


def test_conv_stack_bytes_grow_linearly_with_batch():
    b1, b2, b4 = (count_step(thin_conv3d, b) for b in (1, 2, 4))
    # Weights, their gradients and the optimizer state are fixed; activations scale with the batch.
    assert b4.bytes - b2.bytes == 2 * (b2.bytes - b1.bytes)
    assert b4.flops == 4 * b1.flops


def test_mlp_intensity_grows_with_batch_while_thin_conv3d_stays_flat():
    small, large = count_step(mlp, 2), count_step(mlp, 256)
    assert large.intensity > 20 * small.intensity  # weights read once serve 128x more samples
    conv_small, conv_large = count_step(thin_conv3d, 1), count_step(thin_conv3d, 8)
    # Only the fixed weight traffic shifts it a little: 15.4 FLOP/byte at batch 1, 16.4 at 8.
    assert conv_large.intensity == pytest.approx(conv_small.intensity, rel=0.1)


def test_bf16_moves_fewer_bytes_than_fp32_for_the_same_flops():
    fp32, bf16 = count_step(thin_conv3d, 4, "fp32"), count_step(thin_conv3d, 4, "bf16")
    assert bf16.flops == fp32.flops
    # Not half: the default loss upcasts the bf16 output to fp32 first, as a loss is computed.
    assert bf16.bytes < 0.75 * fp32.bytes
    assert bf16.precision == "bf16"


def test_cpu_attention_is_counted():
    # torch's flop table knows only the CUDA attention kernels; the CPU one is added here.
    cost = count_step(attention, 2)
    b, heads, seq, head_dim = 2, 4, 32, 16
    qkv = 2 * (b * seq) * 64 * 192
    matmul = 2 * b * heads * seq * seq * head_dim  # q @ k^T, or p @ v
    # Forward: two matmuls. Backward: qkv's weight gradient (its input needs none) and five
    # attention matmuls: flop_counter counts the scores' recomputation with the four gradients.
    assert cost.flops_by_phase["forward"] == qkv + 2 * matmul
    assert cost.flops_by_phase["backward"] == qkv + 5 * matmul


def test_a_gpu_device_is_traced_too():
    cost = count_step(mlp, 8, device=get_device("h100"))
    assert cost.flops == count_step(mlp, 8).flops


def test_to_dict_carries_the_numbers():
    data = count_step(one_matmul, 2).to_dict()
    assert data["flops"] == 2 * (2 * 2 * 32 * 32)
    assert data["intensity"] == pytest.approx(data["flops"] / data["bytes"])
    assert set(data["bytes_by_phase"]) == {"forward", "backward", "optimizer"}
    assert isinstance(StepCost(1, "fp32", 0.0, 0.0).intensity, float)


def broken(batch_size: int) -> dict:
    raise ValueError("no such dataset")


class Nonzero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return h * torch.nonzero(h).shape[0]  # data-dependent shape: fake tensors stop here


def untraceable(batch_size: int) -> dict:
    return {"model": Nonzero(), "inputs": torch.randn(batch_size, 8)}


def test_a_build_that_raises_is_a_plan_error_naming_it():
    with pytest.raises(PlanError, match=r"broken\(4\) raised ValueError: no such dataset"):
        count_step(broken, 4)


def test_a_step_fake_tensors_cannot_finish_is_a_tune_error():
    with pytest.raises(TuneError, match="nonzero") as info:
        count_step(untraceable, 4)
    assert "untraceable(4)" in str(info.value)


@pytest.mark.parametrize(("precision", "batch"), [("fp8", 4), ("fp32", 0)])
def test_bad_arguments_are_tune_errors(precision, batch):
    with pytest.raises(TuneError, match="precision 'fp8'" if precision == "fp8" else "batch size 0"):
        count_step(one_matmul, batch, precision)
