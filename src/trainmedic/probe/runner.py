"""Run a user's script or module in this process, exactly as ``python`` would.

The script gets its own ``sys.argv``, ``__main__`` namespace, ``sys.path[0]``, stdout and stderr;
its exit code is returned, whether it ends normally, by ``sys.exit``, by an exception or by
Ctrl+C. Nothing is printed here: the caller decides how to show the outcome.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from trainmedic.errors import NotPythonError, ScriptNotFoundError
from trainmedic.probe.clock import StepLimitReached
from trainmedic.probe.frames import display_path, is_user_file

# What a file that is not Python source usually is, and how to make it runnable.
_NOT_PYTHON_HINTS = {
    ".ipynb": "a Jupyter notebook; export it first: jupyter nbconvert --to script NOTEBOOK.ipynb",
    ".sh": "a shell script; run the Python command inside it under trainmedic instead",
    ".yaml": "a config file; pass the training script that reads it",
    ".yml": "a config file; pass the training script that reads it",
    ".json": "a data or config file; pass the training script that reads it",
    ".toml": "a config file; pass the training script that reads it",
}


class Terminated(BaseException):
    """SIGTERM, raised on the main thread of a torchrun rank so that its report is still written
    (torchrun stops every rank with SIGTERM when one fails)."""


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
        raise NotPythonError(f"{path!r} is a directory without __main__.py; pass the training script inside it")
    hint = _NOT_PYTHON_HINTS.get(script.suffix.lower())
    raw = script.read_bytes()
    if hint is None and (b"\x00" in raw[:4096]):
        hint = "a binary file"
    if hint is not None:
        raise NotPythonError(f"{path!r} is not a Python script: it looks like {hint}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotPythonError(f"{path!r} is not a Python script: it is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return script


def check_module(name: str) -> None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        spec, reason = None, str(exc)
    else:
        reason = "no such module on sys.path"
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
        message = None if code == 0 else f"the script called sys.exit({exc.code!r})"
        return RunOutcome(code, "exit", message)
    except KeyboardInterrupt:
        return RunOutcome(130, "interrupted", "interrupted by Ctrl+C (SIGINT)")
    except Terminated:
        return RunOutcome(143, "interrupted", "stopped by SIGTERM (torchrun stops every rank when one fails)")
    except BaseException as exc:  # noqa: BLE001 - the user's exception is the outcome, not ours
        return RunOutcome(1, "exception", _one_line(exc), _user_traceback(exc))
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


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
    return filename == __file__ or filename.endswith(os.path.join("", "runpy.py")) or filename.startswith("<frozen runpy")


def _one_line(exc: BaseException) -> str:
    where = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        name = frame.f_code.co_filename
        if is_user_file(name):
            where = f"{display_path(name)}:{lineno}"
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} (at {where})" if where else text
