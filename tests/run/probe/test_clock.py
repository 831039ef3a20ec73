import pytest

from trainmedic.run.probe.clock import LOADER, MARKER, OPTIMIZER, StepClock, StepLimitReached


def test_durations_exclude_warmup_and_count_steady_steps():
    clock = StepClock(warmup=2)
    for t in [0.0, 1.0, 2.0, 2.5, 3.0, 3.5]:
        clock.boundary(OPTIMIZER, now=t)
    assert clock.warmup_durations == [1.0, 1.0]
    assert [d for _, d in clock.durations.items()] == [0.5, 0.5, 0.5]
    assert clock.index == 5


def test_a_more_explicit_source_takes_over_and_restarts_the_count():
    clock = StepClock(warmup=0)
    clock.boundary(LOADER, now=0.0)
    clock.boundary(LOADER, now=1.0)
    clock.boundary(OPTIMIZER, now=1.5)
    assert (clock.source, clock.index, clock.restarts) == (OPTIMIZER, 0, 1)
    clock.boundary(LOADER, now=1.7)  # ignored from now on
    clock.boundary(OPTIMIZER, now=2.5)
    assert [d for _, d in clock.durations.items()] == [1.0]
    clock.boundary(MARKER, now=3.0)
    assert clock.source == MARKER


def test_step_limit_raises_a_base_exception_after_n_steady_steps():
    clock = StepClock(warmup=1, max_steps=2)
    clock.boundary(MARKER, now=0.0)
    clock.boundary(MARKER, now=1.0)
    clock.boundary(MARKER, now=2.0)
    with pytest.raises(StepLimitReached):
        clock.boundary(MARKER, now=3.0)
    assert not issubclass(StepLimitReached, Exception)


def test_anchor_resets_at_each_boundary():
    clock = StepClock()
    clock.boundary(OPTIMIZER, now=0.0)
    clock.anchor()
    assert clock.anchored
    clock.boundary(OPTIMIZER, now=1.0)
    assert not clock.anchored


def test_cpu_time_per_step_is_kept_beside_wall_time():
    clock = StepClock(warmup=0)
    for t, cpu in [(0.0, 10.0), (1.0, 10.5), (2.0, 10.7)]:
        clock.boundary(OPTIMIZER, now=t, cpu_now=cpu)
    assert clock.cpu_durations.items() == [(0, 0.5), (1, pytest.approx(0.2))]


class FakeTime:
    """perf_counter and process_time, set by the test (wall at twice the CPU's pace)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.now / 2


def test_the_model_part_of_a_step_runs_from_its_first_timed_anchor_to_its_end(monkeypatch):
    import trainmedic.run.probe.clock as clock_module

    fake = FakeTime()
    monkeypatch.setattr(clock_module, "time", fake)
    clock = StepClock(warmup=1)
    for start in (0.0, 1.0, 2.0, 3.0):
        fake.now = start
        clock.boundary(OPTIMIZER)
        fake.now = start + 0.25
        clock.anchor()  # the sampler noticing the model: untimed, it says nothing of when it began
        fake.now = start + 0.5
        clock.anchor(timed=True)  # the root model's forward pre-hook
        fake.now = start + 0.75
        clock.anchor(timed=True)  # loss.backward(): the model part began earlier
    fake.now = 4.0
    clock.boundary(OPTIMIZER)
    assert [d for _, d in clock.durations.items()] == [1.0, 1.0, 1.0]
    assert clock.model_durations.items() == [(1, (0.5, 0.25)), (2, (0.5, 0.25)), (3, (0.5, 0.25))]


def test_a_step_with_no_timed_anchor_has_no_model_part():
    clock = StepClock(warmup=0)
    clock.boundary(OPTIMIZER, now=0.0)
    clock.anchor()
    clock.boundary(OPTIMIZER, now=1.0)
    assert len(clock.durations) == 1 and len(clock.model_durations) == 0
