"""A build function written for a GPU plans on a CPU-only machine: every way a training script
names a CUDA device (``torch.device("cuda", local_rank)``, an int index, ``.to(0)``) lands on
the CPU while tracing, and the plan is the one of the same build with no device at all.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainmedic.plan import plan_memory
from trainmedic.plan.fake_device import _on_cpu


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))


def _plain(batch_size):
    return dict(model=_model(), inputs=torch.randn(batch_size, 32), optimizer=lambda p: torch.optim.Adam(p))


def _device_positional_index(batch_size):
    device = torch.device("cuda", 0)
    return dict(
        model=_model().to(device),
        inputs=torch.randn(batch_size, 32, device=device),
        optimizer=lambda p: torch.optim.Adam(p),
    )


def _device_local_rank(batch_size):
    local_rank = 1  # as torchrun's LOCAL_RANK would give it
    device = torch.device("cuda", local_rank)
    return dict(
        model=_model().to(device),
        inputs=torch.randn(batch_size, 32).to(device),
        optimizer=lambda p: torch.optim.Adam(p),
    )


def _device_keywords(batch_size):
    device = torch.device(type="cuda", index=0)
    return dict(
        model=_model().to(device),
        inputs=torch.randn(batch_size, 32).to(device),
        optimizer=lambda p: torch.optim.Adam(p),
    )


def _device_from_int(batch_size):
    device = torch.device(0)  # an int is the accelerator's index
    return dict(
        model=_model().to(device),
        inputs=torch.randn(batch_size, 32, device=device),
        optimizer=lambda p: torch.optim.Adam(p),
    )


def _int_devices(batch_size):
    x = torch.randn(batch_size, 32).to(0).to(0, torch.float32).to(device=0).cuda(0)
    return dict(model=_model().to(0).to(device=0).cuda(0), inputs=x, optimizer=lambda p: torch.optim.Adam(p))


def _factory_int_device(batch_size):
    return dict(
        model=_model().to(0),
        inputs=torch.zeros(batch_size, 32, device=0),
        optimizer=lambda p: torch.optim.Adam(p),
    )


@pytest.mark.parametrize(
    "build",
    [
        _device_positional_index,
        _device_local_rank,
        _device_keywords,
        _device_from_int,
        _int_devices,
        _factory_int_device,
    ],
    ids=lambda f: f.__name__.lstrip("_"),
)
def test_a_cuda_build_plans_as_the_same_build_without_a_device(build):
    plain = plan_memory(_plain, 16, device="t4")
    plan = plan_memory(build, 16, device="t4")
    assert plan.exact and not plan.warnings
    assert (plan.peak_bytes, plan.reserved_bytes, plan.breakdown) == (
        plain.peak_bytes,
        plain.reserved_bytes,
        plain.breakdown,
    )


def test_a_cuda_device_made_in_build_is_the_cpu_device():
    made = []

    def build(batch_size):
        made.extend(
            [
                torch.device("cuda", 0),
                torch.device(type="cuda", index=1),
                torch.device("cuda:0"),
                torch.device(0),
            ]
        )
        made.append(torch.device("cpu"))  # left as it is
        return _plain(batch_size)

    plan_memory(build, 2, device="t4", measure_growth=False)
    assert made == [torch.device("cpu")] * 5
    assert all(d.index is None for d in made)


def test_the_rewrite_keeps_the_kind_of_argument_it_was_given():
    # A function that takes a device string gets a string back, one that takes a device gets one.
    assert _on_cpu("cuda") == "cpu" and _on_cpu("cuda:1") == "cpu"
    assert _on_cpu(torch.device("cuda", 3)) == torch.device("cpu")
    assert _on_cpu("cpu") == "cpu" and _on_cpu(0) == 0 and _on_cpu(torch.float16) is torch.float16


@pytest.mark.parametrize(
    ("convert", "dtype"),
    [
        ("half", torch.float16),
        ("bfloat16", torch.bfloat16),
        ("to_bf16", torch.bfloat16),
        ("channels_last", torch.float32),
    ],
)
def test_a_model_converted_in_build_plans_with_its_converted_weights(convert, dtype):
    made = []

    def build(batch_size):
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8 * 14 * 14, 2))
        model = {
            "half": lambda m: m.half(),
            "bfloat16": lambda m: m.bfloat16(),
            "to_bf16": lambda m: m.to(torch.bfloat16),
            "channels_last": lambda m: m.to(memory_format=torch.channels_last),
        }[convert](model)
        made.append(model)
        return dict(
            model=model,
            inputs=torch.randn(batch_size, 3, 16, 16, dtype=dtype),
            optimizer=lambda p: torch.optim.SGD(p, 0.1),
        )

    plan = plan_memory(build, 4, device="h200")
    assert plan.exact
    conv = made[0][0].weight
    assert isinstance(conv, nn.Parameter) and conv.dtype == dtype
    assert conv.is_contiguous(memory_format=torch.channels_last) == (convert == "channels_last")
