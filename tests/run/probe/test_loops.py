"""The loop clock: finding the loop a run without steps repeats, and counting its iterations.

The loops live in real files (the finder reads their source) and run on this test's main thread,
which is where ``trainmedic run`` runs a script and where the clock's signal lands.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from trainmedic.run.probe.clock import LOOP, OPTIMIZER, StepClock, StepLimitReached
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.loops import Loop, LoopClock, LoopFinder, share_bounds

SOURCE = """
import sys


def per_sample(seen, i):
    total = 0
    for echo in range(3):  # over parts of one sample
        total += echo
    seen(sys._getframe())
    return total


def generate(n, seen):
    out = []
    for epoch in range(2):
        for i in range(n):  # the per-sample loop
            out.append(per_sample(seen, i))
    return out


def forever(n, seen):
    i = 0
    while True:
        i += 1  # the body's first line: `while True` has no test to run
        seen(sys._getframe())
        if i >= n:
            return i


def with_nested_def(seen):
    for i in range(2):
        def inner():
            seen(sys._getframe())  # in no loop of its own
        inner()


def nested(pattern, seen):
    for inside in pattern:  # each sample
        if inside:
            for part in range(1):  # a part of the sample
                seen(sys._getframe())
        else:
            seen(sys._getframe())


def recursive(depth, seen):
    for part in range(1):  # a part, at every depth
        if depth:
            return recursive(depth - 1, seen)
        seen(sys._getframe())


def counted(n, on_iteration):
    done = 0
    for i in range(n):  # counted
        on_iteration(i)
        done += 1
    return done
"""


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "gen.py"
    path.write_text(textwrap.dedent(SOURCE), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("gen_loops_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def line_of(module, text):
    lines = Path(module.__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def finder_for(tmp_path, **kwargs):
    return LoopFinder(FrameClassifier(cwd=str(tmp_path)), **kwargs)


def test_the_loops_around_a_sample_are_listed_innermost_first_across_frames(module, tmp_path):
    finder, seen = finder_for(tmp_path), []
    module.generate(1, lambda frame: seen.append(finder.loops_on_stack(frame)))
    # per_sample's echo loop is done when the frame is looked at: only generate's loops hold it.
    assert [loop.where for loop in seen[0]] == [
        f"gen.py:{line_of(module, 'for i in range(n):  # the per-sample loop')}",
        f"gen.py:{line_of(module, 'for epoch in range(2):')}",
    ]
    assert all(loop.line == int(loop.where.rsplit(":", 1)[1]) for loop in seen[0])
    assert all(loop.code is module.generate.__code__ for loop in seen[0])


def test_while_true_is_counted_at_its_bodys_first_line(module, tmp_path):
    finder, seen = finder_for(tmp_path), []
    module.forever(1, lambda frame: seen.append(finder.loops_on_stack(frame)))
    (loop,) = seen[0]
    assert loop.where == f"gen.py:{line_of(module, 'while True:')}"
    assert loop.line == line_of(module, "i += 1  # the body's first line")


def test_a_function_defined_inside_a_loop_is_not_inside_that_loop(module, tmp_path):
    finder, seen = finder_for(tmp_path), []
    module.with_nested_def(lambda frame: seen.append(finder.loops_on_stack(frame)))
    # inner() has no loop; the loop around it belongs to its caller's frame, seen once.
    assert [loop.where for loop in seen[0]] == [f"gen.py:{line_of(module, 'for i in range(2):')}"]


def test_the_finder_picks_the_innermost_loop_holding_nearly_every_sample(module, tmp_path):
    finder, chosen = finder_for(tmp_path, window=30, share=0.8), []
    module.generate(15, lambda frame: chosen.append(finder.observe(frame)))
    assert chosen[:29] == [None] * 29  # not before a full window
    assert chosen[29].where == f"gen.py:{line_of(module, 'for i in range(n):  # the per-sample loop')}"


def test_no_loop_is_chosen_while_samples_are_spread_over_several(module, tmp_path):
    finder, chosen = finder_for(tmp_path, window=20, share=0.8), []

    def seen(frame):
        chosen.append(finder.observe(frame))

    # Alternated by map, a loop in C: a Python loop (a comprehension too) would hold every sample.
    list(map(lambda _: (module.generate(1, seen), module.forever(2, seen)), range(10)))  # noqa: C417
    assert len(chosen) == 40 and chosen == [None] * 40  # half in each: neither reaches 80 %


def test_a_nested_loop_that_reaches_the_share_by_chance_is_not_chosen(module, tmp_path):
    # The inner loop holds 24 of the first 30 samples (80 %, as seed 001's multipath loop did by
    # chance in one run of 35) and 60 % of those after: the outer loop is the run's.
    finder, chosen = finder_for(tmp_path, window=30, share=0.8), []
    luck = [i % 5 != 0 for i in range(30)]
    steady = [i % 5 in (1, 2, 3) for i in range(90)]
    module.nested(luck + steady, lambda frame: chosen.append(finder.observe(frame)))
    picked = [loop.where for loop in chosen if loop is not None]
    assert chosen[29] is None  # 24 of 30 is within noise of 80 %: not a choice yet
    assert picked and set(picked) == {f"gen.py:{line_of(module, 'for inside in pattern:')}"}


def test_a_nested_loop_holding_nearly_every_sample_is_chosen_once_that_is_clear(module, tmp_path):
    finder, chosen = finder_for(tmp_path, window=30, share=0.8), []
    module.nested([i % 20 != 0 for i in range(120)], lambda frame: chosen.append(finder.observe(frame)))
    picked = [i for i, loop in enumerate(chosen) if loop is not None]
    assert picked and picked[0] < 119  # before the long window forces a choice
    assert chosen[picked[0]].where == f"gen.py:{line_of(module, 'for part in range(1):')}"


def test_a_share_within_noise_of_the_line_is_decided_by_its_estimate_at_the_long_window(module, tmp_path):
    finder, chosen = finder_for(tmp_path, window=30, share=0.8, long_window=60), []
    # (the first sample inside: a loop is judged on the samples since it was first seen)
    module.nested([i % 6 != 4 for i in range(60)], lambda frame: chosen.append(finder.observe(frame)))
    assert chosen[:59] == [None] * 59  # 83 % of the samples: too close to 80 % to call early
    assert chosen[59].where == f"gen.py:{line_of(module, 'for part in range(1):')}"


def test_a_loop_is_judged_on_the_samples_since_it_began_not_on_the_set_up_before(module, tmp_path):
    # A generation job on a fast VM: 55 samples of imports, then its loop held every sample for
    # 30 more and the run ended. Over the whole window the loop was under 80 % and never chosen.
    finder, chosen = finder_for(tmp_path, window=30, share=0.8), []
    for _ in range(55):
        chosen.append(finder.observe(None))  # set-up: no frame of the user's inside a loop
    module.generate(15, lambda frame: chosen.append(finder.observe(frame)))
    assert chosen[:84] == [None] * 84  # not before the loop's own 30 samples
    assert chosen[84].where == f"gen.py:{line_of(module, 'for i in range(n):  # the per-sample loop')}"


def test_a_recursive_functions_loop_is_one_loop_of_the_sample(module, tmp_path):
    # The same loop on the stack at five depths: one vote a sample, never more votes than samples.
    finder, chosen = finder_for(tmp_path, window=30, share=0.8), []
    for _ in range(40):
        module.recursive(4, lambda frame: chosen.append(finder.observe(frame)))
    assert chosen[29].where == f"gen.py:{line_of(module, 'for part in range(1):  # a part, at every depth')}"


def test_share_bounds_hold_the_estimate_and_narrow_with_more_samples():
    low, high = share_bounds(30, 30)
    assert 0.8 < low < 1.0 and high == 1.0
    narrow, wide = share_bounds(96, 120), share_bounds(24, 30)
    assert wide[0] < narrow[0] < 0.8 < narrow[1] < wide[1]
    assert share_bounds(0, 0) == (0.0, 1.0)


@pytest.fixture
def loop_clock():
    clock = StepClock(warmup=0)
    watch = LoopClock(clock)
    assert watch.arm(), watch.problem
    yield clock, watch
    watch.disarm()
    assert sys.gettrace() is None
    assert signal.getsignal(watch._signal) == signal.SIG_DFL


def counted_loop(module):
    head = line_of(module, "for i in range(n):\n        on_iteration(i)".splitlines()[0] + "  # counted")
    return Loop(module.counted.__code__, head, f"gen.py:{head}")


def test_each_iteration_after_the_signal_is_a_step_boundary(module, loop_clock):
    clock, watch = loop_clock
    indices = []

    def on_iteration(i):
        if i == 4:
            watch.count(counted_loop(module))  # as the sampler thread does: a signal to this thread
        indices.append(clock.index)

    assert module.counted(20, on_iteration) == 20
    assert clock.source == LOOP
    # The handler runs by the next iteration's head; from then on every head is a boundary, and
    # the loop's exit (its head run once more) closes the last iteration.
    assert clock.index in (14, 15)
    assert indices[-1] == clock.index - 1


def test_the_step_limit_stops_the_loop_from_inside(module, loop_clock):
    clock, watch = loop_clock
    clock.max_steps = 5
    done = []
    watch.count(counted_loop(module))
    with pytest.raises(StepLimitReached):
        module.counted(1000, done.append)
    assert 5 <= len(done) <= 7  # stopped at the 5th boundary after the signal, not at 1000


def test_a_taken_signal_means_no_loop_clock_and_says_why():
    watch = LoopClock(StepClock())
    previous = signal.signal(watch._signal, lambda *_: None)
    try:
        assert not watch.arm()
        assert "taken by the script" in watch.problem
    finally:
        signal.signal(watch._signal, previous)


def test_a_real_step_source_taking_over_removes_the_tracer(module, loop_clock):
    clock, watch = loop_clock
    tracers = []

    def on_iteration(i):
        if i == 2:
            watch.count(counted_loop(module))
        if i == 8:
            clock.boundary(OPTIMIZER)  # the script's first optimizer.step(), after a set-up loop
        tracers.append(sys.gettrace())

    module.counted(20, on_iteration)
    assert clock.source == OPTIMIZER and clock.index == 0  # loop iterations no longer count
    assert tracers[5] is not None and tracers[-1] is None
