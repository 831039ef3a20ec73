"""Run a user's script or module in this process, exactly as ``python`` would.

The script gets its own ``sys.argv``, ``__main__`` namespace, ``sys.path[0]``, stdout and stderr;
its exit code is returned, whether it ends normally, by ``sys.exit``, by an exception or by
Ctrl+C. Nothing is printed here: the caller decides how to show the outcome.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.errors import NotPythonError, ScriptNotFoundError
from trainmedic.run.probe.clock import StepLimitReached
from trainmedic.userfiles import is_user_file, shown_path

# What a file that is not Python source usually is, and how to make it runnable.
_NOT_PYTHON_HINTS = {
    ".ipynb": "a Jupyter notebook; export it first: jupyter nbconvert --to script NOTEBOOK.ipynb",
    ".sh": "a shell script; run the Python command inside it under trainmedic instead",
    ".yaml": "a config file; pass the training script that reads it",
    ".yml": "a config file; pass the training script that reads it",
    ".json": "a data or config file; pass the training script that reads it",
    ".toml": "a config file; pass the training script that reads it",
}


#: Said of every run a signal ended: its report is real but partial.
CUT_SHORT = "the run was cut short and the report covers what was measured until then"


class Terminated(BaseException):
    """SIGTERM, raised on the script's main thread so that the run ends with an outcome and its
    report is still written: a scheduler, ``timeout`` or ``kill`` stop a run with it, and torchrun
    stops every rank with it when one fails. A ``BaseException``, as KeyboardInterrupt is."""

    def __init__(self, signum: int = signal.SIGTERM, why: str | None = None) -> None:
        super().__init__(signum, why)
        self.signum, self.why = signum, why

    @property
    def message(self) -> str:
        name = signal.Signals(self.signum).name
        return f"stopped by {name}{f' ({self.why})' if self.why else ''}: {CUT_SHORT}"


class StopSignals:
    """Ctrl+C (SIGINT) and SIGTERM end the script as they end ``python``, and are only noted after.

    While the script runs, SIGINT raises KeyboardInterrupt (Python's own handler stays, so a script
    that looks for it, as asyncio does, finds it) and SIGTERM raises :class:`Terminated`: the run
    ends with an outcome and a report. Before and after the script (set-up, diagnosis, the JSON's
    write, rank 0's merge) either is only noted: dying there, or a second Ctrl+C breaking the
    write, would lose a report already measured; one noted before the script starts is raised as
    it starts. A signal the parent ignored (nohup) stays ignored, and a script's own handler
    (the Checkpointer) replaces these while it is installed. Main thread only."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, why: str | None = None) -> None:
        #: Said of SIGTERM in the report (torchrun's reason on a rank).
        self.why = why
        self.script_running = False
        #: The first signal received, if any.
        self.received: int | None = None
        #: Wall-clock time the script ended (the rank merge blames the first rank to fail).
        self.script_ended_at: float | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:  # noqa: PYI034 - Self needs Python 3.11
        for signum in self.SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            self._switch(signum, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    @contextlib.contextmanager
    def script(self) -> Iterator[None]:
        self._switch(signal.SIGINT, self._previous[signal.SIGINT])  # python's KeyboardInterrupt
        self._switch(signal.SIGTERM, self._terminate)
        self.script_running = True
        try:
            if self.received is not None:  # asked to stop before the script began: it does not
                self._raise(self.received)
            yield
        finally:
            self.script_running = False
            self.script_ended_at = time.time()
            for signum in self.SIGNALS:
                self._switch(signum, self._note)

    def _switch(self, signum: int, handler: Any) -> None:
        # None: a handler set outside Python, which cannot be put back; left alone like SIG_IGN.
        if self._previous[signum] not in (signal.SIG_IGN, None):
            signal.signal(signum, handler)

    def _note(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum

    def _terminate(self, signum: int, frame: object) -> None:
        self._note(signum, frame)
        if self.script_running:
            self._raise(signum)

    def _raise(self, signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum, self.why)


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int
    #: ``completed``, ``exit``, ``exception``, ``interrupted`` or ``step_limit``.
    outcome: str
    #: One line for the report: the exception and the user's line, or None.
    message: str | None = None
    #: The script's traceback, formatted as Python would print it (trainmedic's frames removed).
    traceback: str | None = None


def check_script(path: str) -> Path:
    """Raise a clear error unless ``path`` is a Python source file that compiles."""
    script = Path(path)
    if not script.exists():
        raise ScriptNotFoundError(
            f"script {path!r} does not exist (looked in {os.getcwd()}); expected a path to a .py file, "
            "or -m package.module to run a module"
        )
    if script.is_dir():
        if (script / "__main__.py").is_file():
            return script
        raise NotPythonError(
            f"{path!r} is a directory without __main__.py; pass the training script inside it"
        )
    hint = _NOT_PYTHON_HINTS.get(script.suffix.lower())
    raw = script.read_bytes()
    if hint is None and (b"\x00" in raw[:4096]):
        hint = "a binary file"
    if hint is not None:
        raise NotPythonError(f"{path!r} is not a Python script: it looks like {hint}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotPythonError(
            f"{path!r} is not a Python script: it is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    return script


def check_module(name: str) -> None:
    # Looked up where `python -m` looks: the current folder first. The `trainmedic` console
    # script's own sys.path[0] is its bin folder, not the current one.
    saved_path = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        spec, reason = None, str(exc)
    else:
        reason = "no such module on sys.path"
    finally:
        sys.path[:] = saved_path
    if spec is None:
        raise ScriptNotFoundError(
            f"module {name!r} cannot be found ({reason}); expected an importable module such as mypkg.train, "
            f"run from the folder that contains it (current folder: {os.getcwd()})"
        )


def run(target: str, args: list[str], module: bool = False) -> RunOutcome:
    """Run ``target`` (a script path, or a module name with ``module=True``) with ``args``."""
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    # What python itself puts first on sys.path: the current folder for -m, else the script's folder.
    path = Path(target).resolve()
    sys.path.insert(0, os.getcwd() if module else str(path.parent if path.is_file() else path))
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
        return RunOutcome(0, "completed")
    except StepLimitReached as stop:
        return RunOutcome(0, "step_limit", f"stopped after {stop.args[0]} steady-state steps (--steps)")
    except SystemExit as exc:
        code = _exit_code(exc.code)
        where = _user_line(exc)
        # argparse's exit on a bad argument happens deep in argparse: the user's call is the line.
        message = (
            None
            if code == 0
            else f"the script called sys.exit({exc.code!r})" + (f" (at {where})" if where else "")
        )
        return RunOutcome(code, "exit", message)
    except KeyboardInterrupt:
        return interrupted()
    except Terminated as stop:
        return interrupted(stop)
    except BaseException as exc:  # noqa: BLE001 - the user's exception is the outcome, not ours
        return RunOutcome(1, "exception", _one_line(exc), _user_traceback(exc))
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def interrupted(stop: Terminated | None = None) -> RunOutcome:
    """The outcome of a run a signal ended: Ctrl+C (``stop`` None) or :class:`Terminated`; the
    exit code the shell gives a process a signal killed, 128 + the signal's number."""
    if stop is None:
        return RunOutcome(128 + signal.SIGINT, "interrupted", f"interrupted by Ctrl+C (SIGINT): {CUT_SHORT}")
    return RunOutcome(128 + stop.signum, "interrupted", stop.message)


def _exit_code(code: object) -> int:
    # Mirrors the interpreter: None -> 0, an int -> itself, anything else is printed -> 1.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _user_traceback(exc: BaseException) -> str:
    tb = exc.__traceback__
    # Drop the frames of this module and runpy so the traceback starts at the user's script.
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _is_ours(filename: str) -> bool:
    return (
        filename == __file__
        or filename.endswith(os.path.join("", "runpy.py"))
        or filename.startswith("<frozen runpy")
    )


def _one_line(exc: BaseException) -> str:
    where = _user_line(exc)
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} (at {where})" if where else text


def _user_line(exc: BaseException) -> str | None:
    """The innermost line of the user's own code in ``exc``'s traceback."""
    where = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        name = frame.f_code.co_filename
        if is_user_file(name):
            where = f"{shown_path(name)}:{lineno}"
    return where
