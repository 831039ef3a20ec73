"""plan_memory on small real models: exact breakdowns, the GPU side, hotspot formulas, the solver."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainmedic.devices import get_device
from trainmedic.plan import plan_memory
from trainmedic.plan.allocator import round_size
from trainmedic.plan.cuda.attention import sdpa_kernel
from trainmedic.plan.cuda.blas import CUBLAS_WORKSPACE
from trainmedic.plan.hotspots import formula_of
from trainmedic.plan.tracker import Allocation

SIZES = [(256, 512), (512, 512), (512, 10)]


def mlp(optimizer=None, batch_size: int = 32, dim: int = 256) -> dict:
    model = nn.Sequential(nn.Linear(dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    parts = dict(model=model, inputs=torch.randn(batch_size, dim))
    if optimizer is not None:
        parts["optimizer"] = optimizer
    return parts


def parameter_bytes(cuda: bool) -> int:
    shapes = [(o, i) for i, o in SIZES] + [(o,) for _, o in SIZES]
    sizes = [4 * torch.Size(s).numel() for s in shapes]
    return sum(round_size(n) if cuda else n for n in sizes)


@pytest.mark.parametrize(
    ("optimizer", "slots", "counters"),
    [
        (lambda p: torch.optim.SGD(p, lr=0.1), 0, False),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1, False),
        (lambda p: torch.optim.Adam(p), 2, True),
        (lambda p: torch.optim.AdamW(p, weight_decay=0.01), 2, True),
    ],
    ids=["sgd", "sgd-momentum", "adam", "adamw"],
)
@pytest.mark.parametrize("device", ["cpu", "a100-80gb"])
def test_parameters_gradients_and_optimizer_state_are_exact(optimizer, slots, counters, device):
    plan = plan_memory(lambda b: mlp(optimizer, b), 32, device=device)
    cuda = device != "cpu"
    params = parameter_bytes(cuda)
    assert plan.breakdown.parameters == params
    # Adam's `step` counters are host scalars on CUDA; on the CPU they are 4 bytes each.
    step_counters = 6 * 4 if counters and not cuda else 0
    assert plan.breakdown.optimizer_state == slots * params + step_counters
    # The peak is in the optimizer step or the backward pass: either way every gradient is live.
    assert plan.breakdown.gradients == params
    assert plan.exact and plan.fits


def test_activations_grow_with_the_batch_and_parameters_do_not():
    small = plan_memory(lambda b: mlp(lambda p: torch.optim.SGD(p, lr=0.1), b), 512, device="cpu")
    large = plan_memory(lambda b: mlp(lambda p: torch.optim.SGD(p, lr=0.1), b), 1024, device="cpu")
    assert large.breakdown.parameters == small.breakdown.parameters
    # Saved for backward: the input (256 wide) and two ReLU outputs (512 wide), 4 bytes each.
    saved_per_sample = 4 * (256 + 512 + 512)
    assert large.breakdown.activations - small.breakdown.activations >= 512 * saved_per_sample


def test_gpu_plan_adds_cublas_workspace_context_and_rounds_blocks():
    plan = plan_memory(lambda b: mlp(None, b), 3, device="t4")
    cpu = plan_memory(lambda b: mlp(None, b), 3, device="cpu")
    assert plan.breakdown.cuda_context == get_device("t4").cuda_context_bytes > 0
    assert plan.peak_bytes >= cpu.peak_bytes + CUBLAS_WORKSPACE
    assert plan.peak_bytes % 512 == 0
    assert plan.reserved_bytes >= plan.peak_bytes and plan.reserved_bytes % (2 << 20) == 0
    assert plan.needed_bytes == plan.reserved_bytes + plan.breakdown.cuda_context
    assert cpu.breakdown.cuda_context == 0


def test_optimizer_runs_foreach_on_a_gpu_plan_as_it_would_on_cuda():
    plan = plan_memory(lambda b: mlp(lambda p: torch.optim.Adam(p), b), 8, device="h100")
    assert any("foreach=True" in n for n in plan.notes)
    cpu = plan_memory(lambda b: mlp(lambda p: torch.optim.Adam(p), b), 8, device="cpu")
    assert not any("foreach" in n for n in cpu.notes)


def test_bf16_autocast_halves_the_hidden_activations_and_keeps_a_cast_of_the_input():
    fp32 = plan_memory(lambda b: mlp(None, b, dim=16), 4096, device="cpu", precision="fp32")
    bf16 = plan_memory(lambda b: mlp(None, b, dim=16), 4096, device="cpu", precision="bf16")
    hidden = 2 * 4096 * 512  # two ReLU outputs saved for backward
    logits_and_loss = 4096 * 10 * 4 + 4  # alive when backward starts
    assert fp32.breakdown.activations == 4096 * 16 * 4 + hidden * 4 + logits_and_loss
    # Under autocast the ReLU outputs and logits are bf16, the first Linear saves a bf16 copy of
    # the fp32 input, and the bf16 copies of the weights are saved too (at most all of them).
    floor = 4096 * 16 * (4 + 2) + hidden * 2 + 4096 * 10 * 2 + 2
    weight_casts = 2 * (16 * 512 + 512 * 512 + 512 * 10)
    assert floor <= bf16.breakdown.activations <= floor + weight_casts
    assert bf16.breakdown.activations < 0.6 * fp32.breakdown.activations


class SdpaModel(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).sum()


def test_sdpa_keeps_attention_linear_in_sequence_and_names_the_target_kernel():
    build = lambda b: dict(model=SdpaModel(), inputs=torch.randn(b, 2048, 256), loss_fn=lambda out: out)  # noqa: E731
    plan = plan_memory(build, 4, device="a100-80gb", precision="bf16")
    assert plan.peak_bytes < 4 * 4 * 2048 * 2048 * 2  # far below one B·H·S² score tensor
    assert any("flash kernel on a100-80gb" in n for n in plan.notes)
    t4 = plan_memory(build, 4, device="t4", precision="fp16")
    assert any("memory-efficient kernel on t4" in n for n in t4.notes)


def test_sdpa_kernel_choice_follows_the_target():
    # sm90 prefers cuDNN's fused attention (an H200 with torch 2.11 ran it for bf16 attention)
    assert sdpa_kernel(get_device("h100"), torch.bfloat16, 128) == "cudnn"
    assert sdpa_kernel(get_device("a100-80gb"), torch.bfloat16, 128) == "flash"
    assert sdpa_kernel(get_device("h100"), torch.float32, 128) == "memory-efficient"
    assert sdpa_kernel(get_device("t4"), torch.float16, 64) == "memory-efficient"
    assert sdpa_kernel(get_device("a100-80gb"), torch.float16, 512) == "memory-efficient"


def _alloc(shape, op, itemsize=4, inputs=()):
    return Allocation(
        0,
        itemsize * torch.Size(shape).numel(),
        op,
        "m.py:1",
        "forward",
        tuple(shape),
        "float32",
        input_shapes=inputs,
    )


def test_formula_names_attention_pairwise_and_batch_axes():
    assert formula_of(_alloc((8, 4, 512, 512), "_softmax"), 8) == (
        "attention",
        "B·H·S²·bytes = 8·4·512²·4 = 32.0 MiB",
    )
    assert formula_of(_alloc((32, 512, 512), "bmm"), 8)[1].startswith("(B·4)·S²·bytes")
    kind, formula = formula_of(_alloc((128, 128, 3072), "sub", inputs=((128, 1, 3072), (1, 128, 3072))), 128)
    assert kind == "pairwise" and formula.startswith("N·M·D·bytes = 128·128·3072·4")
    assert formula_of(_alloc((64, 1024), "relu"), 64) == ("batch", "B·1024·bytes = 64·1024·4 = 256.0 KiB")
    assert formula_of(_alloc((1024, 1024), "mm"), 64)[0] == "fixed"


@pytest.mark.slow
def test_max_batch_is_the_largest_that_fits_without_oom_trials():
    build = lambda b: mlp(lambda p: torch.optim.Adam(p), b, dim=1024)  # noqa: E731
    plan = plan_memory(build, capacity="1GiB", max_batch=True, headroom=0.2)
    assert plan.max_batch and plan.fits and plan.batch_size == plan.max_batch
    assert not plan_memory(build, plan.max_batch + 1, capacity="1GiB", headroom=0.2).fits
    assert plan.bytes_per_sample and plan.bytes_per_sample > 0
    assert "traces" in " ".join(plan.notes)


def test_max_batch_is_zero_when_even_one_sample_does_not_fit():
    plan = plan_memory(lambda b: mlp(None, b), capacity="1MiB", max_batch=True)
    assert plan.max_batch == 0 and not plan.fits
    assert any("even batch 1" in n for n in plan.notes)


@pytest.mark.slow
def test_plan_at_a_given_batch_also_reports_the_max_batch():
    plan = plan_memory(lambda b: mlp(None, b), 16, capacity="2GiB", max_batch=True)
    assert plan.batch_size == 16 and plan.max_batch > 16


@pytest.mark.slow
def test_contract_dict_has_the_fixed_keys_and_types():
    d = plan_memory(lambda b: mlp(lambda p: torch.optim.Adam(p), b), 8, device="t4").to_dict()
    assert d["schema"] == "trainmedic.plan/1" and d["device"] == "t4"
    assert list(d["breakdown"]) == [
        "parameters",
        "gradients",
        "optimizer_state",
        "activations",
        "temporaries",
        "cuda_context",
    ]
    assert all(isinstance(v, int) for v in d["breakdown"].values())
    assert isinstance(d["fits"], bool) and d["max_batch"] is None
    for h in d["hotspots"]:
        assert set(h) == {"op", "where", "bytes", "formula", "advice"}


def test_cuda_calls_in_build_are_planned_on_a_cpu_only_machine():
    def build(batch_size):
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to("cuda")
        model.cuda()
        model.to(torch.device("cuda"))
        x = torch.randn(batch_size, 64).cuda().to("cuda:0")
        return dict(model=model, inputs=x, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))

    plan = plan_memory(build, 8, device="t4")
    reference = plan_memory(
        lambda b: dict(
            model=nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)),
            inputs=torch.randn(b, 64),
            optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        ),
        8,
        device="t4",
    )
    assert plan.exact and plan.peak_bytes == reference.peak_bytes


def test_attention_dropout_is_planned_as_the_gpu_kernels_run_it():
    class Dropped(SdpaModel):
        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1).sum()

    build = lambda b: dict(model=Dropped(), inputs=torch.randn(b, 1024, 256), loss_fn=lambda out: out)  # noqa: E731
    gpu = plan_memory(build, 8, device="a100-80gb")
    assert gpu.peak_bytes < 8 * 4 * 1024 * 1024 * 4  # less than one B·H·S² fp32 tensor
    assert any("attention dropout" in n for n in gpu.notes)
    # On the CPU itself dropout takes SDPA's math path: the scores are real there.
    cpu = plan_memory(build, 8, device="cpu")
    assert cpu.peak_bytes > 8 * 4 * 1024 * 1024 * 4


def test_gradient_accumulation_advice_is_honest_about_odd_batches():
    from trainmedic.plan.hotspot_advice import _accumulate

    assert _accumulate(128).startswith(
        "batch 64 with gradient accumulation over 2 steps keeps the effective batch of 128"
    )
    assert _accumulate(127).startswith(
        "batch 64 with gradient accumulation over 2 steps gives an effective batch of 128"
    )
