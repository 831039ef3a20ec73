"""When a ``save()`` call really writes: every N steps or T seconds, before a deadline, on a signal.

A call that should not write does a clock read and a few comparisons, nothing else: it never
asks an object for its state. The deadline rule is timed from measurements: a save is started at
the last step boundary from which one more step and a save of the measured length, with a
quarter to spare, would no longer finish before the deadline.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from trainmedic.errors import CheckpointError
from trainmedic.units import format_duration, parse_duration

# Seconds kept free before a deadline on top of 1.25 × the measured save: the rename, the fsync
# of the directory and a scheduler that kills a few seconds early.
DEADLINE_MARGIN_S = 1.0
# How fast the step-time estimate forgets a slow step: a maximum that halves per hour of wall
# time, not per call — an evaluation of 10 minutes every 100 steps must still count when the next
# one comes (a per-call decay forgot it and ran through the deadline), while a one-off
# compilation at the start fades within a few hours.
_STEP_HALF_LIFE_S = 3600.0
# A repeat of the same signal within this window is the same request (a launcher forwarding it
# while the scheduler signals the whole group); after it, the user means now.
REPEAT_WINDOW_S = 10.0


def parse_every(every: int | float | str | None) -> tuple[int | None, float | None]:
    """``500`` → every 500 steps; ``"10m"`` or ``600.0`` → every 600 s of wall time; None → never."""
    if every is None:
        return None, None
    if isinstance(every, bool):
        raise CheckpointError(f"every={every!r}: give a step count (every=500) or a duration (every='10m').")
    if isinstance(every, int):
        if every < 1:
            raise CheckpointError(f"every={every}: a step count must be at least 1, e.g. every=500.")
        return every, None
    try:
        seconds = parse_duration(every)
    except ValueError as exc:
        raise CheckpointError(
            f"every={every!r}: {exc}; or a whole number of steps, e.g. every=500."
        ) from None
    if seconds <= 0:
        raise CheckpointError(f"every={every!r}: the interval must be longer than zero, e.g. every='10m'.")
    return None, seconds


def parse_deadline(deadline: Any, now_wall: float, now_mono: float) -> float | None:
    """The deadline as a monotonic time; CheckpointError when it cannot be read or is already past."""
    if deadline is None:
        return None
    if isinstance(deadline, dt.datetime):
        aware = deadline if deadline.tzinfo else deadline.astimezone()
        seconds = aware.timestamp() - now_wall
        shown = aware.isoformat(timespec="seconds")
    elif isinstance(deadline, dt.timedelta):
        seconds, shown = deadline.total_seconds(), str(deadline)
    else:
        try:
            seconds = parse_duration(deadline)
        except ValueError as exc:
            raise CheckpointError(
                f"deadline={deadline!r}: {exc}; or a datetime, a timedelta, or seconds from now."
            ) from None
        shown = repr(deadline)
    if seconds <= 0:
        ago = format_duration(-seconds) if seconds < 0 else "0 s"
        raise CheckpointError(
            f"deadline={shown} is already past ({ago} ago): nothing could be saved before it. Give the time left "
            "in the session from now, e.g. deadline='8h45m' for a 9-hour limit with 15 minutes to spare."
        )
    return now_mono + seconds


class Schedule:
    """Decides, per ``save()`` call, whether to write and why (None: skip)."""

    def __init__(
        self, every_steps: int | None, every_seconds: float | None, deadline_at: float | None
    ) -> None:
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.deadline_at = deadline_at
        self.deadline_hit = False
        self.must_write = True  # the first call measures the save time and proves the directory
        self.last_step: int | None = None
        self.last_write = time.monotonic()
        self.last_exit = self._observed_at = self.last_write
        self.step_seconds = 0.0
        self.save_seconds = 0.0

    def due(self, step: int, now: float) -> str | None:
        interval = now - self.last_exit
        if now - self._observed_at >= 60.0:  # decayed once a minute: a power per call would double its cost
            self.step_seconds *= 0.5 ** ((now - self._observed_at) / _STEP_HALF_LIFE_S)
            self._observed_at = now
        if interval > self.step_seconds:
            self.step_seconds = interval
        # The deadline first: a forced, phase or first save near it must still end the run.
        if (
            self.deadline_at is not None
            and not self.deadline_hit
            and (now + self.step_seconds + 1.25 * self.save_seconds + DEADLINE_MARGIN_S >= self.deadline_at)
        ):
            return "deadline"
        if self.must_write:
            return "first"
        if (
            self.every_steps is not None
            and self.last_step is not None
            and step - self.last_step >= self.every_steps
        ):
            return "every"
        # Due at the write's time plus the interval, compared as that sum: ``now - last_write``
        # rounds (2007.35 s of uptime + 60.0 - 2007.35 came out under 60 in a fresh-clone test run).
        if self.every_seconds is not None and now >= self.last_write + self.every_seconds:
            return "every"
        return None

    def wrote(self, step: int, seconds: float, reason: str) -> None:
        self.must_write = False
        self.last_step = step
        self.save_seconds = seconds
        self.last_write = self.last_exit = time.monotonic()
        if reason == "deadline":
            self.deadline_hit = True

    def resumed(self, step: int, save_seconds: float) -> None:
        """After a restore the last save's duration is known: no need to write at the first call."""
        self.last_step = step
        self.save_seconds = save_seconds
        self.must_write = False

    def seconds_left(self, now: float) -> float | None:
        return None if self.deadline_at is None else self.deadline_at - now


class SignalCatcher:
    """Turns SIGTERM/SIGUSR1 into a flag the next ``save()`` call reads.

    One handler per signal serves every live catcher (two Checkpointers in one process both
    save): the handler the signal had before the first catcher is kept once and given back when
    the last catcher of that signal leaves, in whatever order they close. A repeat within
    REPEAT_WINDOW_S is the same request; a later one acts at once. A watchdog makes sure a run
    whose loop no longer calls ``save()`` still ends: after ``grace()`` seconds without the stop
    save starting, the signal is raised again and handled as it would have been without
    trainmedic.
    """

    _live: weakref.WeakSet[SignalCatcher] = weakref.WeakSet()
    #: The handler each signal had before trainmedic's, while any catcher listens to it.
    _original: dict[int, Any] = {}

    def __init__(
        self,
        names: str | tuple[str, ...] | list[str],
        grace: Callable[[], float] = lambda: 30.0,
        repeat_window: float = REPEAT_WINDOW_S,
    ) -> None:
        self.received: int | None = None
        #: A repeat within this many seconds is the same request (a scheduler signalling every
        #: process of a group); a person pressing Ctrl+C twice means now, so generate() uses ~1 s.
        self.repeat_window = repeat_window
        self.saving = False  # set by the Checkpointer when the save the signal asked for starts
        self._first_at = 0.0
        self._grace = grace
        self.numbers = [_signal_number(name) for name in ([names] if isinstance(names, str) else names)]
        if threading.current_thread() is not threading.main_thread():
            self.installed = False  # Python only lets the main thread install handlers
            return
        for number in self.numbers:
            if number not in SignalCatcher._original:
                SignalCatcher._original[number] = signal.signal(number, SignalCatcher._handle)
        self.installed = True
        SignalCatcher._live.add(self)
        weakref.finalize(self, SignalCatcher._release, tuple(self.numbers))

    @staticmethod
    def _listening(number: int) -> list[SignalCatcher]:
        return [c for c in SignalCatcher._live if number in c.numbers and c.installed]

    @staticmethod
    def _handle(number: int, frame: Any) -> None:
        now = time.monotonic()
        listening = SignalCatcher._listening(number)
        fresh = [c for c in listening if c.received is None]
        if fresh:
            for catcher in fresh:
                catcher.received, catcher._first_at = number, now
            grace = max([REPEAT_WINDOW_S, *(c._grace() for c in listening)])
            timer = threading.Timer(grace, SignalCatcher._watchdog, (number,))
            timer.daemon = True
            timer.start()
            return
        if listening and now - min(c._first_at for c in listening) < min(c.repeat_window for c in listening):
            return
        # Asked again later (or every catcher was collected without closing): the user or the
        # scheduler means now. Hand the signal to whoever had it before trainmedic (the default
        # ends the process; the last checkpoint is intact).
        original = SignalCatcher._original.get(number, signal.SIG_DFL)
        for catcher in listening:
            catcher.uninstall()
        if signal.getsignal(number) is SignalCatcher._handle:  # no catcher left to give it back
            SignalCatcher._give_back(number, original)
        if callable(original):
            original(number, frame)
        else:
            signal.raise_signal(number)

    @staticmethod
    def _watchdog(number: int) -> None:
        listening = SignalCatcher._listening(number)
        if listening and not any(c.saving for c in listening):
            os.kill(os.getpid(), number)  # handled in the main thread as a late repeat: acts at once

    @staticmethod
    def _give_back(number: int, original: Any) -> None:
        SignalCatcher._original.pop(number, None)
        if signal.getsignal(number) is SignalCatcher._handle:  # unless someone replaced ours since
            signal.signal(number, original if original is not None else signal.SIG_DFL)

    @staticmethod
    def _release(numbers: tuple[int, ...]) -> None:
        """Give back the signals no live catcher listens to any more (after uninstall(), or when a
        catcher is freed without it)."""
        if threading.current_thread() is not threading.main_thread():
            return  # handlers can only change there; ours passes an unheard signal on meanwhile
        for number in numbers:
            if not SignalCatcher._listening(number):
                SignalCatcher._give_back(number, SignalCatcher._original.get(number))

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        SignalCatcher._live.discard(self)
        SignalCatcher._release(tuple(self.numbers))

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""


_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


def _signal_number(name: Any) -> int:
    number: int | None = None
    if isinstance(name, int) and not isinstance(name, bool):
        number = name if name in set(signal.Signals) else None
    elif isinstance(name, str):
        upper = name.upper()
        value = getattr(signal, upper if upper.startswith("SIG") else f"SIG{upper}", None)
        number = int(value) if isinstance(value, signal.Signals) else None
    if number is None:
        raise CheckpointError(
            f"signals: {name!r} is not a signal on this system; give names like 'SIGTERM', 'SIGUSR1'."
        )
    if number in _UNCATCHABLE:
        raise CheckpointError(
            f"signals: {signal.Signals(number).name} cannot be caught by any process, so nothing can be saved on it; "
            "give signals that ask politely, e.g. ('SIGTERM', 'SIGUSR1')."
        )
    return number
