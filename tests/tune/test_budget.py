"""The budget's alarm: OutOfTime where the search's own code runs, never inside torch's."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from trainmedic.tune.budget import Budget, OutOfTime, in_torch

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals land on the main thread"
)

# A busy loop whose frame reads as torch's own module (as a rule lookup that C++ calls back into).
TORCH_LIKE = """
def spin(seconds, clock):
    until = clock() + seconds
    while clock() < until:
        pass
    return True
"""


def torch_like_spin():
    scope = {"__name__": "torch._library.simple_registry"}
    exec(compile(TORCH_LIKE, "<torch-like>", "exec"), scope)
    return scope["spin"]


def test_the_alarm_raises_in_the_searchs_own_code():
    started = time.monotonic()
    with pytest.raises(OutOfTime), Budget(0.05).alarm():
        while time.monotonic() - started < 10:
            pass
    assert time.monotonic() - started < 5


def test_the_alarm_waits_until_torchs_own_code_has_returned():
    spin, finished = torch_like_spin(), []
    with pytest.raises(OutOfTime), Budget(0.05).alarm():
        finished.append(spin(0.3, time.monotonic))  # the deadline passes in here: no raise
        while True:  # back in the search's own code: now
            pass
    assert finished == [True]


def test_a_frame_is_torchs_by_its_module():
    scope = {"__name__": "torch.overrides"}
    exec("import sys\ndef here():\n    return sys._getframe()\n", scope)
    assert in_torch(scope["here"]())
    assert not in_torch(sys._getframe()) and not in_torch(None)
