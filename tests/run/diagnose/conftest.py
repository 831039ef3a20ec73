"""Measurements as a watch session would produce them, built by hand for rule tests."""

from __future__ import annotations

import pytest

from trainmedic.run.probe.recorder import Aggregate
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.probe.session import Measurements
from trainmedic.run.probe.source_facts import Sources
from trainmedic.run.report.model import DeviceInfo


def make_measurements(
    lines, durations, ops_by_function=None, census_steps=0, per_step=None, cpu_durations=None, sources=None
):
    steady = Aggregate()
    for (slot, kind, where, function), seconds in lines.items():
        steady.add((slot, kind, where, function), seconds, samples=max(int(seconds / 0.01), 1))
    return Measurements(
        wall_s=sum(durations) + 1.0,
        setup_s=1.0,
        step_source="optimizer",
        warmup=3,
        steady_steps=len(durations),
        durations=list(enumerate(durations, start=3)),
        warmup_durations=durations[:1] * 3,
        cpu_durations=list(enumerate(durations if cpu_durations is None else cpu_durations, start=3)),
        steady=steady,
        warm=Aggregate(),
        setup=Aggregate(),
        per_step=per_step or [],
        ops_by_function=ops_by_function or {},
        census_steps=census_steps,
        device=DeviceInfo("cpu", "test cpu", {"cuda": "not available"}),
        sampler_interval_s=0.01,
        samples=steady.samples,
        sampler_busy_s=0.01,
        sources=sources if sources is not None else Sources(),
    )


@pytest.fixture
def completed():
    return RunOutcome(0, "completed")


@pytest.fixture
def measure():
    return make_measurements
