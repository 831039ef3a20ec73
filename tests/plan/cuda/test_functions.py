"""Functions traced as CUDA runs them: deep-copied layers, fused dropout, linear's bias, the loss."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from trainmedic.devices import get_device
from trainmedic.plan.trace import trace_step


def _encoder(batch_size):
    layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, norm_first=True)
    return dict(model=nn.TransformerEncoder(layer, 3), inputs=torch.randn(batch_size, 64, 128),
                optimizer=lambda p: torch.optim.AdamW(p))


def test_a_deep_copied_layers_transposed_weights_are_views_not_tensors():
    trace = trace_step(_encoder, 4, get_device("h200"))
    # nn.TransformerEncoder deep-copies its layer; F.linear's weight.t() of a copy is a view.
    assert not [a for a in trace.allocations.values() if a.op == "t"]


def test_fused_dropout_keeps_a_one_byte_mask_made_before_its_output():
    trace = trace_step(_encoder, 4, get_device("h200"))
    empties = [a for a in trace.allocations.values() if a.op == "empty_like" and a.phase == "forward"]
    masks = [a for a in empties if a.dtype == "bool"]
    assert masks and all(m.nbytes == 4 * 64 * 128 or m.nbytes == 4 * 64 * 512 for m in masks)
    first = empties[0]
    assert first.dtype == "bool"  # the mask first, as CUDA's native_dropout allocates it


def test_deepcopy_of_a_fake_parameter_keeps_it_a_parameter():
    from trainmedic.plan.tracker import DeepcopyByClone

    with FakeTensorMode(), DeepcopyByClone():
        layer = copy.deepcopy(nn.Linear(4, 8))
        weight = layer.weight
        assert isinstance(weight, nn.Parameter) and weight.requires_grad
        assert weight.t().untyped_storage()._cdata == weight.untyped_storage()._cdata


def test_the_default_loss_is_taken_in_fp32():
    def build(batch_size):
        return dict(model=nn.Linear(16, 1000), inputs=torch.randn(batch_size, 16))

    trace = trace_step(build, 64, get_device("h200"), "bf16")
    casts = [a for a in trace.allocations.values() if a.op == "_to_copy" and a.shape == (64, 1000)]
    assert casts and casts[0].dtype == "float32"
