"""The op census counts the steps the report is about, even when a better step source arrives late."""

from __future__ import annotations

import torch

from trainmedic.run.probe.clock import LOOP, OPTIMIZER
from trainmedic.run.probe.session import WatchSession


def set_up_loop_body(x):
    for _ in range(30):
        x = x * 1.0001 + 0.5  # a model's build, a preprocessing loop: not the training step
    return x


def training_step(x):
    return (x * 2.0).sum()


def test_a_better_step_source_restarts_the_census_over_its_own_warm_up():
    session = WatchSession(warmup=3).start()
    try:
        x = torch.ones(4)
        for _ in range(6):  # iterations of a set-up loop counted as steps (probe/loops.py)
            session.clock.boundary(LOOP)
            set_up_loop_body(x)
        for _ in range(6):  # then the script's optimizer steps take over
            session.clock.boundary(OPTIMIZER)
            training_step(x)
    finally:
        measured = session.stop()
    assert measured.step_source == OPTIMIZER
    functions = {key.rsplit(":", 1)[1] for key in measured.ops_by_function}
    assert functions == {"training_step"}
    assert measured.census_steps == 2
    assert sum(measured.ops_by_function.values()) / measured.census_steps == 2  # mul and sum, per step
