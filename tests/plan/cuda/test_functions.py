"""Functions traced as CUDA runs them: deep-copied layers, fused dropout, linear's bias, the loss."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from trainmedic.devices import get_device
from trainmedic.plan.trace import trace_step


def _encoder(batch_size):
    layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True, norm_first=True)
    return dict(
        model=nn.TransformerEncoder(layer, 3),
        inputs=torch.randn(batch_size, 64, 128),
        optimizer=lambda p: torch.optim.AdamW(p),
    )


@pytest.mark.slow
def test_a_deep_copied_layers_transposed_weights_are_views_not_tensors():
    trace = trace_step(_encoder, 4, get_device("h200"))
    # nn.TransformerEncoder deep-copies its layer; F.linear's weight.t() of a copy is a view.
    assert not [a for a in trace.allocations.values() if a.op == "t"]


@pytest.mark.slow
def test_fused_dropout_keeps_a_one_byte_mask_made_before_its_output():
    trace = trace_step(_encoder, 4, get_device("h200"))
    empties = [a for a in trace.allocations.values() if a.op == "empty_like" and a.phase == "forward"]
    masks = [a for a in empties if a.dtype == "bool"]
    assert masks and all(m.nbytes == 4 * 64 * 128 or m.nbytes == 4 * 64 * 512 for m in masks)
    first = empties[0]
    assert first.dtype == "bool"  # the mask first, as CUDA's native_dropout allocates it


def test_deepcopy_of_a_fake_parameter_keeps_it_a_parameter():
    from trainmedic.plan.fake_device import DeepcopyByClone

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


def test_a_packed_sequence_rnn_is_left_to_torch_and_an_unpacked_one_to_the_cudnn_stand_in(monkeypatch):
    # _VF.gru(input, hx, params, has_biases, ...) has 9 arguments, and so has the packed form
    # _VF.gru(data, batch_sizes, hx, params, has_biases, ...): the params list tells them apart.
    from trainmedic.plan.cuda import functions, rnn

    calls = []
    monkeypatch.setattr(rnn, "cudnn_rnn", lambda mode, *args: calls.append(("cudnn", mode)))
    monkeypatch.setattr(functions.torch, "gru", lambda *args: calls.append(("torch", "gru")), raising=True)
    on_target = functions.FunctionsAsOnTarget(get_device("h200"), [])
    x, h, params = torch.empty(2, 5, 8), torch.empty(1, 2, 16), [torch.empty(48, 8)]
    on_target.rnn("gru", x, h, params, True, 1, 0.0, True, False, True)
    on_target.rnn("gru", x, torch.tensor([2, 2]), h, params, True, 1, 0.0, True, False)
    assert calls == [("cudnn", "gru"), ("torch", "gru")]


def test_attention_of_three_dimensional_queries_takes_the_math_path():
    import torch.nn.functional as F

    def build(b):
        proj = nn.Linear(16, 48)
        return dict(
            model=proj,
            inputs=torch.randn(b, 32, 16),
            loss_fn=lambda out: F.scaled_dot_product_attention(*out.chunk(3, -1)).sum(),
        )

    trace = trace_step(build, 4, get_device("h200"))
    assert trace.incomplete is None and not trace.estimates[1:]


def test_attention_under_autocast_picks_the_kernel_for_the_cast_inputs():
    import torch.nn.functional as F

    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x):
            q, k, v = self.qkv(x).float().view(x.shape[0], x.shape[1], 3, 1, 64).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v)  # fp32 inputs: autocast casts them to bf16

    trace = trace_step(
        lambda b: dict(model=Attend(), inputs=torch.randn(b, 32, 64)), 2, get_device("h100"), "bf16"
    )
    assert any("cudnn kernel on h100" in n for n in trace.notes)


def test_reductions_of_scalars_and_expanded_softmax_gradients_plan_as_the_card_runs_them():
    def build(b):
        lin = nn.Linear(32, 512)
        return dict(
            model=lin,
            inputs=torch.randn(b, 32),
            loss_fn=lambda out: out.softmax(-1).sum() + out.mean().sum(0),
        )

    trace = trace_step(build, 1024, get_device("h200"))
    assert trace.incomplete is None
    temporaries = [a for a in trace.allocations.values() if a.op == "softmax backward grad*output"]
    # The gradient of .sum() is an expanded scalar; grad * output is output-sized all the same.
    assert temporaries and temporaries[0].nbytes == 1024 * 512 * 4


def test_norm_under_cuda_autocast_runs_in_fp32():
    def build(b):
        lin = nn.Linear(8, 8)
        return dict(
            model=lin,
            inputs=torch.randn(b, 8),
            loss_fn=lambda out: torch.norm(out) + torch.norm(out, 2, 1).sum(),
        )

    trace = trace_step(build, 16, get_device("h200"), "bf16")
    assert trace.incomplete is None


def test_a_gap_in_the_card_model_is_a_stated_estimate_not_the_users_error(monkeypatch):
    from trainmedic.plan.cuda.kernels import CudaKernels

    def broken(self, tracker, func, args, where):
        raise ValueError("a shape this model does not know")

    monkeypatch.setattr(CudaKernels, "_logsumexp", broken)

    def build(b):
        return dict(
            model=nn.Linear(8, 8), inputs=torch.randn(b, 8), loss_fn=lambda out: out.logsumexp(1).mean()
        )

    trace = trace_step(build, 4, get_device("h200"))
    assert trace.incomplete is None
    assert any("buffers of logsumexp are not modelled (ValueError" in e for e in trace.estimates)


def test_an_lstm_with_a_projection_plans_with_its_projected_outputs():
    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 32, proj_size=16, batch_first=True)

        def forward(self, x):
            out, _ = self.lstm(x)
            assert out.shape[-1] == 16
            return out.sum()

    trace = trace_step(
        lambda b: dict(model=Projected(), inputs=torch.randn(b, 10, 8), loss_fn=lambda out: out),
        4,
        get_device("h200"),
    )
    assert trace.incomplete is None
