"""trainmedic.watch() and trainmedic.step() from Python, on a real torch training loop."""

import pytest
import torch

import trainmedic
from trainmedic.errors import WatchError


def train(steps, sleep_in_batch=0):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 256)
    for _ in range(steps):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.slow
def test_watch_finds_optimizer_steps_and_builds_a_report():
    with trainmedic.watch() as w:
        train(30)
    report = w.report
    assert report.steps.source == "optimizer"
    assert report.steps.count == 30 - 1 - 3
    assert report.outcome == "completed"
    assert sum(report.breakdown.values()) == pytest.approx(1.0, abs=0.01)


@pytest.mark.slow
def test_steps_limit_ends_the_block_quietly():
    with trainmedic.watch(steps=4) as w:
        train(10_000)
    assert w.report.outcome == "step_limit"
    assert w.report.steps.count == 4


def test_an_exception_in_the_block_is_reported_and_propagates():
    with pytest.raises(ValueError, match="bad batch"):
        with trainmedic.watch() as w:
            train(8)
            raise ValueError("bad batch")
    assert w.report.outcome == "exception"
    assert "bad batch" in w.report.message


def test_hooks_are_removed_after_the_block():
    from torch.utils.data import dataloader

    before = dataloader._BaseDataLoaderIter.__next__
    with trainmedic.watch():
        assert dataloader._BaseDataLoaderIter.__next__ is not before
    assert dataloader._BaseDataLoaderIter.__next__ is before


def test_step_outside_a_watch_is_a_no_op_and_sessions_do_not_nest():
    trainmedic.step()
    with trainmedic.watch():
        with pytest.raises(WatchError, match="already running"):
            trainmedic.watch().__enter__()
