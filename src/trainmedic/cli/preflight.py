"""``trainmedic preflight``: run every experiment tiny on the CPU and print what happened.

stdout gets the answer, rendered by ``trainmedic.preflight.console`` (a table, one row per
experiment, then the details worth reading: the error and the user's line, where a stuck run
was, the config override that missed a copy, the resume check, the plan and the session
estimate); stderr gets progress and errors. Exit codes: 0 all passed, 1 something failed, was
stuck, did not resume identically or does not fit, 2 bad input, 128 + N when stopped by signal
N (SIGTERM, SIGHUP: the running child is killed first).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from trainmedic.cli.output import USAGE, output_problem
from trainmedic.errors import PreflightError
from trainmedic.preflight import Overrides, load_settings, run_preflight
from trainmedic.preflight.console import render_preflight

PASSED, PROBLEMS = 0, 1


@dataclass(frozen=True, kw_only=True)
class PreflightOptions:
    names: tuple[str, ...]
    commands: tuple[str, ...]
    budget: str | None
    device: str | None
    session_limit: str | None
    resume_check: bool | None
    json_path: Path | None
    project: Path | None


def run_preflight_command(options: PreflightOptions, out: Console, err: Console) -> int:
    """Read the declarations, run them, render the report on ``out``; return the exit code."""
    overrides = Overrides(
        names=options.names,
        commands=options.commands,
        budget=options.budget,
        device=options.device,
        session_limit=options.session_limit,
        resume_check=options.resume_check,
        project=options.project,
    )
    try:
        settings = load_settings(overrides)
    except PreflightError as exc:
        _error(err, str(exc))
        return USAGE
    problem = output_problem([("--json", options.json_path)])
    if problem:  # found now, not after every experiment has run
        _error(err, problem)
        return USAGE
    count = len(settings.experiments)
    index = {e.name: i for i, e in enumerate(settings.experiments, 1)}

    def progress(name: str, text: str) -> None:
        err.print(
            f"trainmedic preflight: [{index[name]}/{count}] {name}: {text}",
            markup=False,
            highlight=False,
            soft_wrap=True,
            style="dim",
        )

    try:
        with _stop_on_signals():
            report = run_preflight(settings, progress)
    except _Stopped as stop:
        name = signal.Signals(stop.signum).name
        _error(err, f"stopped by {name}: the running experiment was killed and its temporary files removed")
        return 128 + stop.signum
    render_preflight(report, out)
    if options.json_path is not None:
        try:
            report.write_json(options.json_path)
        except OSError as exc:
            _error(err, f"cannot write the JSON report to {options.json_path}: {exc.strerror or exc}")
            return USAGE
        err.print(
            f"trainmedic preflight: JSON report written to {options.json_path}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return PASSED if report.passed else PROBLEMS


class _Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds through the runner's finally blocks like Ctrl-C does,
    so the running child's process group is killed and the temporary folder removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stop_on_signals():
    def stop(signum, frame):
        for other in _STOP_SIGNALS:  # a second signal must not interrupt the clean-up itself
            signal.signal(other, signal.SIG_IGN)
        raise _Stopped(signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set there; the main thread's owner handles signals
        return
    previous = {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _error(err: Console, message: str) -> None:
    err.print(
        f"trainmedic preflight: error: {message}", style="red", markup=False, highlight=False, soft_wrap=True
    )


__all__ = ["PASSED", "PROBLEMS", "USAGE", "PreflightOptions", "run_preflight_command"]
