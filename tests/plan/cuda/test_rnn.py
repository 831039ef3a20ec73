"""LSTM, GRU and RNN planned as cuDNN runs them, and what the plan says of its rates."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from trainmedic.plan import plan_memory
from trainmedic.plan.cuda import rnn


class Recurrent(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(64, 128, num_layers=2, batch_first=True)
        self.head = nn.Linear(128, 1)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def _build(kind):
    return lambda b: dict(
        model=Recurrent(kind), inputs=torch.randn(b, 32, 64), optimizer=lambda p: torch.optim.Adam(p)
    )


def test_an_lstm_on_the_card_it_was_measured_on_is_checked():
    plan = plan_memory(_build("LSTM"), 64, device="h200")
    assert plan.confidence.level == "checked"
    assert any(n.startswith("LSTM planned as cuDNN runs it") for n in plan.notes)


@pytest.mark.parametrize("kind", ["GRU", "RNN"])
def test_a_gru_or_rnn_takes_the_lstm_rates_by_its_gates_and_says_it_guessed(kind):
    plan = plan_memory(_build(kind), 64, device="h200")
    assert plan.confidence.level == "estimated"
    assert any("rates measured for an LSTM" in r for r in plan.confidence.reasons)


def test_the_reserve_grows_with_steps_samples_units_and_layers():
    small, large = (plan_memory(_build("LSTM"), b, device="h200") for b in (32, 64))
    reserve_per_sample = rnn.RESERVE_BYTES_PER_UNIT * 32 * 128 * 2  # steps x units x layers
    assert large.peak_bytes - small.peak_bytes >= 32 * reserve_per_sample


def test_the_weights_are_one_flat_buffer_as_cuda_keeps_them():
    with FakeTensorMode():
        model = Recurrent("LSTM")
        rnn.flatten_weights(model)
        storages = {w.untyped_storage()._cdata for w in model.rnn._flat_weights}
    assert len(storages) == 1
