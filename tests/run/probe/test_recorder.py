"""The recorder keeps memory flat however long the run, and never counts the unfinished step."""

import pytest

from trainmedic.run.probe.clock import MARKER, StepClock
from trainmedic.run.probe.frames import Classified
from trainmedic.run.probe.recorder import BEFORE_MODEL, SLOTS, Recorder


def sample(category="compute", where="train.py:10"):
    return Classified(category, "forward" if category == "compute" else "", where, None)


def test_warmup_and_setup_stay_out_of_steady_state():
    recorder = Recorder(warmup=2)
    recorder.add(-1, 0, False, sample(), 5.0)  # before the first step: set-up
    for step in range(6):
        recorder.add(step, 0, False, sample(), 1.0)
    tail = recorder.close()
    assert recorder.setup.seconds == 5.0
    assert recorder.warm.seconds == 2.0  # steps 0 and 1
    assert recorder.steady.seconds == 3.0  # steps 2, 3, 4; step 5 never finished
    assert tail.seconds == 1.0
    assert recorder.steady_steps == 3


def test_plain_user_code_is_split_by_whether_the_model_had_started():
    recorder = Recorder(warmup=0)
    recorder.add(0, 0, False, sample(None), 2.0)
    recorder.add(0, 0, True, sample(None), 1.0)
    recorder.add(1, 0, False, sample(), 0.0)
    slots = dict(zip(SLOTS, recorder.steady.slots))
    assert slots[BEFORE_MODEL] == 2.0
    assert slots["user:after_model"] == 1.0


def test_a_new_step_source_discards_what_was_counted_before():
    recorder = Recorder(warmup=0)
    recorder.add(0, 0, False, sample(), 1.0)
    recorder.add(1, 0, False, sample(), 1.0)
    recorder.add(0, 1, False, sample(), 1.0)  # generation 1: the optimizer took over
    recorder.add(1, 1, False, sample(), 1.0)
    assert recorder.steady.seconds == 1.0


@pytest.mark.slow
def test_memory_stays_bounded_over_a_million_steps():
    clock, recorder = StepClock(warmup=0, capacity=512), Recorder(warmup=0, capacity=512)
    for step in range(1_000_000):
        clock.boundary(MARKER, now=float(step))
        if step % 10 == 0:  # the sampler sees one step in ten
            recorder.add(clock.index, 0, True, sample(where=f"train.py:{step % 7}"), 0.01)
    assert len(clock.durations) <= 512
    assert len(recorder.per_step) <= 512
    assert len(recorder.steady.lines) <= 7
    assert clock.index == 999_999
