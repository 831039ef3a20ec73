"""The confirmation's schedule: ABBA blocks, the transition step of each block dropped, the
gain and its interval from the block pairs, and the fix taken out however it ends."""

from __future__ import annotations

import pytest

from trainmedic.run.probe import confirm
from trainmedic.run.probe.confirm import Experiment, plan_quads
from trainmedic.run.probe.counterfactuals import Arm, Counterfactual


def _experiment(quads: int = 1) -> tuple[Experiment, Counterfactual, list[bool]]:
    removed: list[bool] = []
    counterfactual = Counterfactual("the thing replayed", Arm())
    counterfactual._undo.append(lambda: removed.append(True))
    return (
        Experiment(counterfactual, category="data", where="train.py:9", quads=quads),
        counterfactual,
        removed,
    )


def test_arms_alternate_as_is_fixed_fixed_as_is_in_blocks_and_the_first_step_of_each_is_dropped():
    experiment, counterfactual, removed = _experiment()
    arms, done = [], False
    while not done:
        arms.append(counterfactual.arm.fixed)
        fixed = counterfactual.arm.fixed
        counterfactual.used += fixed
        # A transition step is slow in both arms; the timed ones are 30 ms as-is, 10 ms fixed.
        first = len(arms) % confirm.BLOCK == 1
        done = experiment.step(0.5 if first else (0.010 if fixed else 0.030))
    assert arms == [False] * 3 + [True] * 6 + [False] * 3
    result = experiment.result
    assert result is not None and result.measured and result.problem is None
    assert len(result.as_is) == len(result.fixed) == 4  # 2 timed steps in each of 2 blocks
    assert result.gain == pytest.approx(3.0)
    assert result.pair_gains == [pytest.approx(3.0), pytest.approx(3.0)]
    assert removed == [True] and counterfactual.arm.fixed is False


def test_a_run_that_ends_mid_experiment_is_not_a_measurement_and_the_fix_comes_out():
    experiment, counterfactual, removed = _experiment()
    for _ in range(4):
        experiment.step(0.02)
    result = experiment.finish()
    assert not result.measured and "ended after 1 of 4 blocks" in result.problem
    assert removed == [True] and counterfactual.arm.fixed is False
    assert experiment.finish() is result  # once only


def test_a_run_that_ends_after_a_pair_of_blocks_is_a_shorter_measurement():
    experiment, counterfactual, _ = _experiment()
    for _ in range(2 * confirm.BLOCK + 1):  # as-is block, fixed block, one step of the next
        counterfactual.used += counterfactual.arm.fixed
        experiment.step(0.01 if counterfactual.arm.fixed else 0.02)
    result = experiment.finish()
    assert result.measured and result.problem is None
    assert (result.blocks, result.planned_blocks) == (2, 4)
    assert result.pair_gains == [2.0] and len(result.as_is) == len(result.fixed) == 2


def test_a_change_that_never_took_effect_measures_nothing():
    experiment, counterfactual, _ = _experiment()
    while not experiment.step(0.02):
        pass
    assert not experiment.result.measured and "never took effect" in experiment.result.problem


def test_the_number_of_quads_keeps_the_experiment_within_its_share_of_the_window():
    assert plan_quads(window_s=1.0, step_s=0.02, expected=5.0) == 1  # 50 steps: one quad, the least
    many = plan_quads(window_s=20.0, step_s=0.02, expected=5.0)
    assert many == confirm.MAX_QUADS
    middle = plan_quads(window_s=2.0, step_s=0.02, expected=2.0)
    quad_s = 2 * confirm.BLOCK * 0.02 * (1 + 1 / 2.0)
    assert 1 <= middle < confirm.MAX_QUADS and middle * quad_s <= confirm.BUDGET * 2.0
