"""The sync-wait timer times real synchronising calls and charges them to the user's line."""

import sys

import torch

from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.sync_waits import SyncWaitTimer


def _timer(**kwargs):
    # Tests live outside the library roots, so this file is "user code" to the classifier.
    return SyncWaitTimer(FrameClassifier(), min_attributed_s=0.0, **kwargs)


def test_item_calls_are_timed_at_the_users_line():
    timer = _timer()
    timer.install(torch)
    try:
        loss = torch.tensor(2.0)
        line = sys._getframe().f_lineno + 2
        for _ in range(5):
            total = loss.item()  # the waiting line
        assert total == 2.0
        values = torch.arange(3).tolist()
    finally:
        timer.uninstall()
    waits = timer.snapshot()
    where = f"{FrameClassifier().where(__file__, line)}"
    assert waits.calls_by_where[where] == 5
    assert waits.seconds_by_where[where] > 0
    assert waits.call_by_where[where] == "item"
    assert waits.function_by_where[where].endswith(":test_item_calls_are_timed_at_the_users_line")
    assert waits.calls == 6 and values == [0, 1, 2]
    assert waits.measured


def test_uninstall_puts_torch_back_and_nested_calls_count_once():
    original_item, original_sync = torch.Tensor.item, torch.cuda.synchronize
    timer = _timer()
    timer.install(torch)
    assert torch.Tensor.item is not original_item
    str(torch.tensor([1.5, 2.5]))  # printing a tensor reads it through several sync entry points
    float(torch.tensor(3.0))
    timer.uninstall()
    assert torch.Tensor.item is original_item and torch.cuda.synchronize is original_sync
    assert "item" not in torch.Tensor.__dict__
    calls = timer.snapshot().calls
    float(torch.tensor(4.0))
    assert timer.snapshot().calls == calls, "nothing is timed once uninstalled"


def test_only_counted_steps_and_the_training_thread_are_timed():
    counting = [False]
    timer = _timer(counting=lambda: counting[0])
    timer.install(torch)
    try:
        torch.tensor(1.0).item()  # warm-up: not counted
        counting[0] = True
        torch.tensor(1.0).item()
    finally:
        timer.uninstall()
    assert timer.snapshot().calls == 1


def test_short_calls_are_counted_without_a_line():
    timer = SyncWaitTimer(FrameClassifier(), min_attributed_s=10.0)  # nothing waits 10 s
    timer.install(torch)
    try:
        torch.tensor(1.0).item()
    finally:
        timer.uninstall()
    waits = timer.snapshot()
    assert waits.calls == 1 and waits.total_s > 0 and not waits.seconds_by_where
