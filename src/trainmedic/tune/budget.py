"""The wall-clock budget of a search (``--budget``): one deadline that every phase answers to.

A ``--budget 90s`` search once took 1 m 46 s. The time escaped in four places, each closed here:

- the clock started inside ``tune()``, after the process had imported torch and loaded the
  target (2-4 s on a 2-core machine): the CLI now counts from the process's own start;
- a configuration started a moment before the deadline still ran its first step, its warm-up
  and three trials: ``measure`` stops a run that cannot finish its trials in the time left,
  and a run is not started when the time left is shorter than the quickest run so far;
- a ``torch.compile`` first step (10-40 s on a CPU), a memory plan or a roofline trace cannot
  be stopped from outside by a check between steps: ``alarm()`` raises :class:`OutOfTime` in
  the main thread at the deadline, wherever the search is;
- each run of a ``--script`` is a new process: its start-up is charged to the budget, and the
  ``--help`` check and every run are killed at the deadline.

What is left over the budget is the torch call in flight when the deadline passes (a signal
handler runs between Python bytecodes) and writing the answer. The alarm does not raise inside
torch's own Python code: some of it runs as a callback from C++ that cannot pass an exception on
(a memory plan's fake-tensor dispatch looks up rules so), and an ``OutOfTime`` raised there ended
the process with ``std::terminate`` (exit -6) in CI. There it rings again a moment later, until
the search is back in code of its own, the build's or the interpreter's.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

#: How soon the alarm rings again when the deadline found the search inside torch's own code.
RETRY_S = 0.005


def in_torch(frame) -> bool:
    """Whether the interrupted frame is torch's own Python code."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return isinstance(name, str) and (name == "torch" or name.startswith("torch."))


class OutOfTime(BaseException):
    """The budget's deadline passed. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` in torch, in the user's build or in tune's own per-configuration
    handling turns the end of the budget into a failed configuration."""


@dataclass
class Budget:
    """``seconds`` from ``started_at`` (a ``time.monotonic()`` reading); None seconds: no budget."""

    seconds: float | None
    started_at: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float | None:
        return None if self.seconds is None else self.started_at + self.seconds

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def spent(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def allows(self, estimate_s: float) -> bool:
        """Whether a run expected to take ``estimate_s`` can finish before the deadline."""
        left = self.remaining()
        return left is None or left >= estimate_s

    @contextlib.contextmanager
    def alarm(self) -> Iterator[None]:
        """Raise :class:`OutOfTime` in this thread when the deadline passes inside the block.

        Only where a signal can do it: the main thread of a Unix process, with no other
        ``ITIMER_REAL`` running (the caller's own alarm is left alone); elsewhere the block runs
        unbounded and only the checks between runs and trials hold the budget.
        """
        left = self.remaining()
        usable = (
            left is not None
            and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0
        )
        if left is None or not usable:
            yield
            return
        if left <= 0:
            raise OutOfTime

        def ring(signum, frame):
            if in_torch(frame):
                signal.setitimer(signal.ITIMER_REAL, RETRY_S)  # not here: C++ may be the caller
                return
            raise OutOfTime

        previous = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, left)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
