"""cuDNN convolution workspaces: measured on the card, scaled from another batch, or estimated."""

from __future__ import annotations

import torch
from torch import nn

from trainmedic.devices import get_device
from trainmedic.plan import plan_memory
from trainmedic.plan.cuda import conv


def _pass(batch: int, kind: str = conv.FORWARD, dtype: str = "float32") -> conv.ConvPass:
    # The second 3x3 convolution of benchmarks/plan_zoo.py's CNN, recorded on an H200.
    return conv.ConvPass(
        kind, dtype, (batch, 32, 32, 32), (32, 32, 3, 3), (1, 1), (1, 1), (1, 1), 1, False, False
    )


def test_a_recorded_pass_takes_the_measured_workspace():
    assert conv.workspace("h200", _pass(128), estimate=1) == (33_591_443, "measured")
    assert conv.workspace("h200", _pass(128, conv.BACKWARD_FILTER), estimate=1) == (293_601_280, "measured")


def test_another_batch_scales_the_same_layer_and_says_so():
    assert conv.workspace("h200", _pass(64), estimate=1) == (33_591_443 // 2, "scaled")


def test_an_unrecorded_pass_or_card_is_estimated():
    assert conv.workspace("h200", _pass(128, dtype="bfloat16"), estimate=123) == (123, "estimated")
    assert conv.workspace("t4", _pass(128), estimate=123) == (123, "estimated")


def test_the_estimate_is_input_output_and_weight():
    x, w = torch.empty(4, 3, 16, 16, device="meta"), torch.empty(8, 3, 3, 3, device="meta")
    out = torch.empty(4, 8, 16, 16, device="meta")
    ((conv_pass, estimate),) = conv.passes_of(
        "convolution", (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), out
    )
    assert conv_pass.kind == conv.FORWARD and conv_pass.batch == 4
    assert estimate == (4 * 3 * 16 * 16 + 4 * 8 * 16 * 16 + 8 * 3 * 3 * 3) * 4


def _cnn(batch_size):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
    return dict(
        model=model, inputs=torch.randn(batch_size, 3, 32, 32), optimizer=lambda p: torch.optim.SGD(p, 0.1)
    )


def test_a_plan_with_estimated_workspaces_says_so_and_is_less_sure():
    plan = plan_memory(_cnn, 16, device="h200")
    assert plan.confidence.level == "estimated"
    assert any("convolution passes estimated" in r for r in plan.confidence.reasons)
    assert any("of 5 convolution passes take cuDNN workspaces measured" in n for n in plan.notes)


def test_the_floor_gives_up_the_workspaces_cudnn_can_do_without():
    plan = plan_memory(_cnn, 64, device="h200")
    assert plan.floor_reserved_bytes is not None
    assert plan.needed_floor_bytes <= plan.needed_bytes
    assert plan.fits == (plan.required_bytes <= plan.usable_bytes)
    assert get_device("h200").is_gpu
