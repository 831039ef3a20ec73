"""Run one child: its own process group, output to files, a wall-clock budget, a stack dump.

A child still running at the end of its budget gets SIGUSR2 (the injected sitecustomize dumps
its stacks and config snapshot), a bounded wait for that dump, then SIGKILL to the whole group
(DataLoader workers included). Run B of the resume check is instead killed the moment its
events show the save it was waiting for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmedic._os import kill_group, read_tail
from trainmedic.preflight import child

#: How long a stuck child may take to write its stack dump before it is killed anyway; once
#: faulthandler has written (the C-level dump is immediate), the Python dump gets DUMP_AFTER_C.
DUMP_WAIT, DUMP_AFTER_C = 5.0, 2.0
#: Poll period while watching a file; a tiny run saves every few milliseconds.
POLL = 0.005
TAIL_BYTES = 64 * 1024


@dataclass
class RunOutcome:
    directory: Path
    returncode: int | None  # None: stuck, killed by us, or never started
    seconds: float
    stuck: bool = False
    #: Run B: the step of the save event that triggered the kill.
    killed_after_save: int | None = None
    start_error: str | None = None
    stdout: str = ""  # tails
    stderr: str = ""

    def file(self, name: str) -> Path:
        return self.directory / name


def run_child(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    directory: Path,
    budget: float,
    *,
    kill_after_save: int | None = None,
) -> RunOutcome:
    """Run ``argv`` until it exits, its budget ends, or (with ``kill_after_save``) it saves that step."""
    directory.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    outcome = RunOutcome(directory, None, 0.0)
    proc = None
    with open(directory / child.STDOUT, "wb") as out, open(directory / child.STDERR, "wb") as err:
        try:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                outcome.start_error = f"cannot start {argv[0]!r}: {exc.strerror or exc}"
                return outcome
            if kill_after_save is None:
                _wait(proc, budget, outcome)
            else:
                _wait_for_save(proc, budget, kill_after_save, outcome)
        finally:
            # Also on KeyboardInterrupt, or the exception trainmedic preflight's SIGTERM/SIGHUP
            # handler raises: the group (workers, grandchildren) never outlives us.
            if proc is not None:
                kill_group(proc.pid)
                proc.wait()
    outcome.seconds = min(time.monotonic() - start, budget) if outcome.stuck else time.monotonic() - start
    outcome.stdout = read_tail(directory / child.STDOUT, TAIL_BYTES)
    outcome.stderr = read_tail(directory / child.STDERR, TAIL_BYTES)
    return outcome


def _wait(proc: subprocess.Popen, budget: float, outcome: RunOutcome) -> None:
    try:
        outcome.returncode = proc.wait(timeout=budget)
        return
    except subprocess.TimeoutExpired:
        pass
    outcome.stuck = True
    _dump_stacks(proc, outcome.directory)


def _dump_stacks(proc: subprocess.Popen, directory: Path) -> None:
    target = _instrumented_pid(directory)
    if target is None:
        target = proc.pid
    elif not _in_group(target, proc.pid):
        # The instrumented process has exited (a wrapper still runs): its pid may belong to
        # someone else by now, and SIGUSR2's default action would kill that process.
        return
    try:
        os.kill(target, signal.SIGUSR2)
    except ProcessLookupError:
        return
    stack, native = directory / child.STACK, directory / child.FAULTHANDLER
    deadline = time.monotonic() + DUMP_WAIT
    while time.monotonic() < deadline and proc.poll() is None and not stack.exists():
        if file_size(native) > 0:
            deadline = min(deadline, time.monotonic() + DUMP_AFTER_C)
        time.sleep(POLL)


def _wait_for_save(proc: subprocess.Popen, budget: float, step: int, outcome: RunOutcome) -> None:
    from trainmedic.preflight.events import EventReader

    reader = EventReader(outcome.directory / child.EVENTS)
    deadline = time.monotonic() + budget
    while True:
        for event in reader.read():
            if event.get("event") == "save" and isinstance(event.get("step"), int) and event["step"] >= step:
                outcome.killed_after_save = event["step"]
                kill_group(proc.pid)
                proc.wait()
                return
        code = proc.poll()
        if code is not None:  # it ended on its own: it was never stopped after that save
            outcome.returncode = code
            return
        if time.monotonic() >= deadline:
            outcome.stuck = True
            return
        time.sleep(POLL)


def _in_group(pid: int, group: int) -> bool:
    """Is ``pid`` still a process of the child's group (the child leads its own session)?"""
    try:
        return os.getpgid(pid) == group
    except (ProcessLookupError, PermissionError):
        return False


def _instrumented_pid(directory: Path) -> int | None:
    try:
        return int((directory / child.SITE_PID).read_text().strip())
    except (OSError, ValueError):
        return None


def file_size(path: Path) -> int:
    """Bytes in ``path``; 0 while it does not exist yet."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
