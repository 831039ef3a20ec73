"""When save() writes: the first call, every N steps or T seconds, the deadline rule, signals."""

from __future__ import annotations

import datetime as dt
import os
import signal

import pytest

from trainmedic.checkpoint.schedule import (
    DEADLINE_MARGIN_S,
    Schedule,
    SignalCatcher,
    parse_deadline,
    parse_every,
)
from trainmedic.errors import CheckpointError


def test_every_reads_steps_and_durations():
    assert parse_every(500) == (500, None)
    assert parse_every("10m") == (None, 600.0)
    assert parse_every(90.0) == (None, 90.0)
    assert parse_every(None) == (None, None)


@pytest.mark.parametrize("bad", [0, -3, True, "soon", "0s"])
def test_bad_every_names_the_value(bad):
    with pytest.raises(CheckpointError) as info:
        parse_every(bad)
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)
    assert "every=" in str(info.value)


def test_deadline_forms_become_monotonic_times():
    assert parse_deadline("8h45m", 1000.0, 50.0) == 50.0 + 31500
    assert parse_deadline(dt.timedelta(minutes=2), 1000.0, 50.0) == 170.0
    future = dt.datetime.now() + dt.timedelta(hours=1)
    assert parse_deadline(future, future.timestamp() - 3600, 0.0) == pytest.approx(3600.0)
    assert parse_deadline(None, 0.0, 0.0) is None


@pytest.mark.parametrize(
    "past", ["0s", 0, dt.timedelta(seconds=-5), dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)]
)
def test_a_deadline_already_past_is_refused(past):
    with pytest.raises(CheckpointError, match="already past"):
        parse_deadline(past, dt.datetime.now().timestamp(), 0.0)


def test_unreadable_deadline_names_it():
    with pytest.raises(CheckpointError, match="deadline='tomorrow'"):
        parse_deadline("tomorrow", 0.0, 0.0)


def test_first_call_writes_then_every_n_steps():
    schedule = Schedule(every_steps=3, every_seconds=None, deadline_at=None)
    now = schedule.last_exit
    assert schedule.due(1, now) == "first"
    schedule.wrote(1, 0.01, "first")
    assert [schedule.due(step, now) for step in (2, 3)] == [None, None]
    assert schedule.due(4, now) == "every"


def test_every_seconds_counts_from_the_last_write():
    schedule = Schedule(every_steps=None, every_seconds=60.0, deadline_at=None)
    schedule.wrote(1, 0.01, "first")
    assert schedule.due(2, schedule.last_write + 59.0) is None
    assert schedule.due(3, schedule.last_write + 60.0) == "every"


def test_every_seconds_is_due_at_the_interval_whatever_the_clock_reads():
    # A fresh-clone test run's monotonic clock read 2007.351149968 at the write: (t + 60.0) - t
    # is 59.99999999999977 there, and a save due at t + 60 s was skipped. The test above hit it
    # by chance.
    schedule = Schedule(every_steps=None, every_seconds=60.0, deadline_at=None)
    schedule.wrote(1, 0.01, "first")
    schedule.last_write = 2007.351149968
    assert schedule.due(2, schedule.last_write + 60.0) == "every"


def test_deadline_save_leaves_room_for_one_step_and_the_measured_save():
    schedule = Schedule(every_steps=None, every_seconds=None, deadline_at=None)
    schedule.wrote(1, 4.0, "first")  # a save takes 4 s
    start = schedule.last_exit
    schedule.deadline_at = start + 100.0
    # Steps of 2 s: the save must start once now + 2 + 1.25 × 4 + margin reaches the deadline.
    latest_start = 100.0 - 2.0 - 5.0 - DEADLINE_MARGIN_S
    now, step, decisions = start, 1, []
    while now < start + 100.0:
        now += 2.0
        step += 1
        reason = schedule.due(step, now)
        decisions.append((now - start, reason))
        schedule.last_exit = now
        if reason:
            break
    at, reason = decisions[-1]
    assert reason == "deadline"
    assert latest_start - 2.0 < at <= latest_start + 1e-9
    assert at + 4.0 < 100.0  # the save of the measured length finishes before the deadline


def test_a_slow_step_is_remembered_for_the_deadline():
    schedule = Schedule(every_steps=None, every_seconds=None, deadline_at=None)
    schedule.wrote(1, 0.0, "first")
    start = schedule.last_exit
    schedule.due(2, start + 30.0)  # one 30 s evaluation step
    schedule.last_exit = start + 30.0
    schedule.due(3, start + 30.1)
    assert schedule.step_seconds > 25.0


def test_signal_sets_a_flag_and_handlers_are_given_back():
    before = signal.getsignal(signal.SIGUSR1)
    catcher = SignalCatcher(("SIGUSR1", "term"))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert catcher.received == signal.SIGUSR1
        assert catcher.name == "SIGUSR1"
    finally:
        catcher.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_unknown_signal_name_is_refused():
    with pytest.raises(CheckpointError, match="SIGNOPE"):
        SignalCatcher(("SIGNOPE",))


def test_a_long_evaluation_every_100_steps_is_still_remembered_at_the_deadline():
    # 1 s steps, a 600 s evaluation every 100 steps, 30 s saves: a per-call decay forgot the
    # evaluation after ~100 calls and ran through the deadline.
    schedule = Schedule(every_steps=None, every_seconds=None, deadline_at=None)
    schedule.wrote(1, 30.0, "first")
    start = now = schedule.last_exit
    schedule.deadline_at = start + 8 * 3600 + 45 * 60
    step, saved_at = 1, None
    while now < schedule.deadline_at:
        step += 1
        now += 600.0 if step % 100 == 0 else 1.0
        if schedule.due(step, now) == "deadline":
            saved_at = now
            break
        schedule.last_exit = now
    assert saved_at is not None, "the deadline passed without a deadline save"
    assert saved_at + 30.0 <= schedule.deadline_at


def test_the_deadline_wins_over_the_first_save():
    schedule = Schedule(every_steps=None, every_seconds=None, deadline_at=None)
    schedule.deadline_at = schedule.last_exit + 0.5
    assert schedule.due(1, schedule.last_exit + 0.1) == "deadline"


def test_every_live_catcher_is_flagged_and_a_quick_repeat_is_the_same_request():
    first, second = SignalCatcher(("SIGUSR1",)), SignalCatcher(("SIGUSR1",))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)  # forwarded twice: not "now"
        assert (first.received, second.received) == (signal.SIGUSR1, signal.SIGUSR1)
        assert first.installed and second.installed
    finally:
        second.uninstall()
        first.uninstall()


def test_the_signal_goes_back_to_the_users_handler_whatever_order_catchers_close_in():
    heard = []
    before = signal.signal(signal.SIGUSR1, lambda number, frame: heard.append(number))
    try:
        for order in ("made", "reversed"):
            first, second = SignalCatcher("SIGUSR1"), SignalCatcher("SIGUSR1")
            for catcher in (first, second) if order == "made" else (second, first):
                catcher.uninstall()
            os.kill(os.getpid(), signal.SIGUSR1)
            assert heard == [signal.SIGUSR1], order
            assert first.received is None and second.received is None
            heard.clear()
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_catcher_dropped_without_closing_hands_a_signal_on():
    heard = []
    before = signal.signal(signal.SIGUSR1, lambda number, frame: heard.append(number))
    try:
        SignalCatcher("SIGUSR1")  # never uninstalled, freed at once
        assert signal.getsignal(signal.SIGUSR1) is not SignalCatcher._handle  # given back when freed
        os.kill(os.getpid(), signal.SIGUSR1)
        assert heard == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, before)


@pytest.mark.parametrize("bad", ["SIGKILL", "SIGSTOP", 99999, "", True])
def test_uncatchable_or_unknown_signals_are_refused(bad):
    with pytest.raises(CheckpointError, match="signals"):
        SignalCatcher((bad,))


def test_a_single_signal_name_is_one_signal():
    catcher = SignalCatcher("SIGUSR1")
    try:
        assert catcher.numbers == [signal.SIGUSR1]
    finally:
        catcher.uninstall()
