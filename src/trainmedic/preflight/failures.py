"""What went wrong in a child run, read back in the parent: the error line and the user's line.

Shared by the experiment runs, the resume check's runs and the memory plan's child: a failed run
is told by its uncaught exception (the injected excepthook's ``exception.json``, else the last
traceback on stderr), else its last stderr line or exit status; a stuck one by its stack dump
and its record of the loops on that stack (loop_progress.py).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path

from trainmedic._os import read_json
from trainmedic.preflight import child
from trainmedic.preflight.frames import (
    Frame,
    Where,
    innermost_user,
    main_thread_frames,
    parse_traceback,
    read_exception,
    resolve,
    stuck_in_loop,
    with_source,
)
from trainmedic.preflight.process import RunOutcome
from trainmedic.userfiles import UserFiles


def describe_failure(run: RunOutcome, user: UserFiles, cwd: Path) -> tuple[str, Where | None]:
    """The error line and the user's line of a run that did not exit 0."""
    if run.start_error:
        return run.start_error, None
    failure = read_exception(run.file(child.EXCEPTION)) or parse_traceback(run.stderr)
    where = None
    error = failure.error if failure else ""
    if failure is not None:
        frame = innermost_user(resolve(failure.frames, cwd), user)
        where = Where(with_source(frame)) if frame else None
    if not error:
        error = last_line(run.stderr) or exit_text(run.returncode)
    elif run.returncode is not None and run.returncode < 0:
        error = f"{error} ({exit_text(run.returncode)})"
    return error, where


def stuck_frames(run: RunOutcome, user: UserFiles) -> list[Frame]:
    """The main thread's frames (outermost first) of a run still going at the end of its budget,
    from its SIGUSR2 dumps; [] when no dump came back."""
    return main_thread_frames(read_text(run.file(child.STACK)), read_text(run.file(child.FAULTHANDLER)), user)


def stuck_at(run: RunOutcome, user: UserFiles, cwd: Path, argv: Sequence[str] = ()) -> Where | None:
    """Where an experiment's run was stuck: the user's loop still iterating and how far it got
    (its SIGUSR2 record of the loops, ``child.LOOPS``), the user's innermost frame; the innermost
    of all for a command that is a library's own entry point (``python -m pkg``). ``argv``: the
    command, whose options may say a loop's total."""
    return stuck_in_loop(stuck_frames(run, user), read_json(run.file(child.LOOPS)), user, cwd, argv)


def exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
