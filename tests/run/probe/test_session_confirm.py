"""The watch session around a confirmation: the window's measurements are the report's, the
experiment's steps are its own, and a confirmer that fails never ends the user's run."""

from __future__ import annotations

import pytest

from trainmedic.run.probe.clock import StepLimitReached
from trainmedic.run.probe.confirm import BLOCK, Experiment
from trainmedic.run.probe.counterfactuals import Arm, Counterfactual
from trainmedic.run.probe.session import WatchSession


def _loop(session: WatchSession, steps: int = 200) -> int:
    """Steps marked by hand until the session stops the loop; how many were made."""
    made = 0
    with pytest.raises(StepLimitReached):
        for _ in range(steps):
            made += 1
            session.step()
    return made


def test_the_experiments_steps_follow_the_window_and_stay_out_of_its_measurements():
    planned: list[Experiment] = []

    def confirm(window):
        counterfactual = Counterfactual("nothing, really", Arm())
        counterfactual.used = 1  # as if the change took effect
        planned.append(Experiment(counterfactual, category="data", where="x.py:1", quads=1))
        return planned[0]

    session = WatchSession(warmup=1, max_steps=5, confirm=confirm).start()
    try:
        made = _loop(session)
    finally:
        measurements = session.stop()
    assert made == 1 + 1 + 5 + 4 * BLOCK  # the first mark, warm-up, the window, one quad of blocks
    assert measurements.steady_steps == 5 and len(measurements.durations) == 5
    assert measurements.confirmation is planned[0].result and measurements.confirmation.measured


def test_a_confirmer_that_raises_is_a_note_and_the_run_stops_at_its_window():
    session = WatchSession(warmup=1, max_steps=3, confirm=lambda window: 1 / 0).start()
    try:
        made = _loop(session)
    finally:
        measurements = session.stop()
    assert made == 1 + 1 + 3  # the first mark, warm-up, the window: no more
    assert "could not be set up (ZeroDivisionError" in measurements.confirmation.problem


def test_without_a_confirmer_nothing_changes():
    session = WatchSession(warmup=1, max_steps=3).start()
    try:
        assert _loop(session) == 1 + 1 + 3
    finally:
        measurements = session.stop()
    assert measurements.confirmation is None and measurements.steady_steps == 3
