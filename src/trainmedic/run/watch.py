"""Watching a custom training loop from Python: ``trainmedic.watch()`` and ``trainmedic.step()``.

    with trainmedic.watch() as w:
        for batch in batches:
            ...
            trainmedic.step()        # optional: optimizer steps are found on their own
    print(w.report.bottleneck)

The library never prints: render ``w.report`` with ``trainmedic.render_console`` or save it with
``w.report.write_json(path)``.
"""

from __future__ import annotations

import sys
from types import TracebackType

from trainmedic.run.diagnose import diagnose
from trainmedic.run.probe.clock import StepLimitReached
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.probe.sampler import DEFAULT_INTERVAL_S
from trainmedic.run.probe.session import DEFAULT_WARMUP, WatchSession, active_session
from trainmedic.run.report.model import Report


class Watch:
    """A context manager around a training loop; ``report`` is set when the block ends."""

    def __init__(
        self, warmup: int = DEFAULT_WARMUP, steps: int | None = None, interval: float = DEFAULT_INTERVAL_S
    ) -> None:
        self._session = WatchSession(warmup=warmup, max_steps=steps, interval=interval)
        self.report: Report | None = None

    def __enter__(self) -> Watch:
        self._session.start()
        return self

    def step(self) -> None:
        self._session.step()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        measurements = self._session.stop()
        if exc_type is None:
            outcome = RunOutcome(0, "completed")
        elif issubclass(exc_type, StepLimitReached) and exc is not None:
            outcome = RunOutcome(0, "step_limit", f"stopped after {exc.args[0]} steady-state steps")
        elif issubclass(exc_type, KeyboardInterrupt):
            outcome = RunOutcome(130, "interrupted", "interrupted by Ctrl+C (SIGINT)")
        else:
            outcome = RunOutcome(1, "exception", f"{exc_type.__name__}: {exc}")
        self.report = diagnose(measurements, list(sys.argv), outcome)
        # The step limit is ours to stop the loop with; anything else is the caller's to handle.
        return exc_type is not None and issubclass(exc_type, StepLimitReached)


def watch(
    warmup: int = DEFAULT_WARMUP, steps: int | None = None, interval: float = DEFAULT_INTERVAL_S
) -> Watch:
    """Watch the training loop in a ``with`` block; ``steps`` stops it after N steady-state steps."""
    return Watch(warmup=warmup, steps=steps, interval=interval)


def step() -> None:
    """Mark the end of one training step. A no-op when nothing is watching."""
    session = active_session()
    if session is not None:
        session.step()
