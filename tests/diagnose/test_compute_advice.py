"""A compute- or bandwidth-bound verdict points to the tool that measures the levers left."""

from __future__ import annotations

import pytest

from trainmedic.diagnose.rules import compute, memory_bandwidth
from trainmedic.diagnose.rules.base import Context


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compute_advice_points_to_tune(device):
    advice = compute.advise("", Context(where="train.py:12", seconds_per_step=0.1, step_median_s=0.1, device=device))
    assert "`trainmedic tune model.py:build`" in advice.fix
    assert "--script train.py --set batch_size=2,4,8" in advice.fix
    assert advice.title.endswith("at train.py:12")


def test_bandwidth_advice_says_a_larger_batch_does_not_help_and_points_to_tune():
    advice = memory_bandwidth.advise("", Context(where=None, seconds_per_step=0.1, step_median_s=0.1, device="cuda"))
    assert "a larger batch does not help" in advice.fix and "trainmedic tune" in advice.fix
