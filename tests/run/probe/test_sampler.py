"""The stack sampler on a real thread: what the training thread does is what gets recorded."""

import json

import pytest

from trainmedic.run.probe.clock import StepClock
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.recorder import SLOTS, Recorder
from trainmedic.run.probe.sampler import StackSampler


def test_samples_land_on_what_the_thread_is_doing():
    clock, recorder = StepClock(), Recorder(warmup=0)
    sampler = StackSampler(clock, recorder, FrameClassifier(), interval=0.002)
    sampler.start()
    payload = {"values": list(range(2000))}
    while sampler.samples < 50:  # busy in json until enough samples were taken, no sleeping
        json.dumps(payload)
    sampler.stop()
    recorder.close()
    slots = dict(zip(SLOTS, recorder.setup.slots))
    assert slots["host_other"] / recorder.setup.seconds > 0.8
    assert 0 < sampler.busy_seconds < recorder.setup.seconds


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval=0"):
        StackSampler(StepClock(), Recorder(warmup=0), FrameClassifier(), interval=0)
