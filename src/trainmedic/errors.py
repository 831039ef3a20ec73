"""Exceptions raised by trainmedic's library layers.

The library never prints and never exits; it raises one of these, and ``cli/`` turns them into
a message and an exit code. Every message names the bad value, what was expected, and the fix.

    TrainmedicError
    ├── ScriptError            the thing to run cannot be run
    │   ├── ScriptNotFoundError
    │   └── NotPythonError
    ├── WatchError             a watch session was used the wrong way
    ├── MissingExtraError      an optional dependency is not installed (names the extra)
    ├── DataError              trainmedic.data cannot serve a source as asked
    │   ├── SourceError        the source cannot be opened or read
    │   ├── FieldError         a field is missing, ragged, of another length or of no numeric dtype
    │   ├── TierError          a forced tier does not fit (names the sizes and the tier that would)
    │   └── ResumeError        a state_dict does not belong to this loader
    ├── LintError              a lint path that does not exist, or an unknown rule code
    ├── DeviceError            a GPU name the catalog does not know, or one that names several cards
    ├── PlanError              a build function that cannot be planned, a bad batch or precision
    ├── CheckpointError        a checkpoint directory that cannot be written, a save that failed
    │   └── CheckpointMismatchError  a checkpoint taken from another model or optimizer (names the keys)
    ├── PreflightError         a preflight declaration that cannot be read or run
    ├── BatchError             trainmedic.batch cannot batch or generate as asked: ragged outputs,
    │                          params of mixed lengths, an output folder holding another job
    ├── TuneError              trainmedic tune cannot search as asked: a bad grid value, a batch
    │                          axis it cannot find, an option --set names that the script lacks
    └── AttachError            trainmedic attach cannot read the process: none with that PID, not
                               Python, no permission to read it, a Python py-spy cannot read

    Preempted (SystemExit, not a TrainmedicError): raised by Checkpointer.save after the save a
    signal or the deadline asked for, so the run ends cleanly with finally-blocks run.
"""

from __future__ import annotations


class TrainmedicError(Exception):
    """Base class of every error trainmedic raises on purpose."""


class ScriptError(TrainmedicError):
    """The script or module given to ``trainmedic run`` cannot be run."""

    #: The exit code the CLI uses, matching what ``python`` itself returns for the same case.
    exit_code = 2


class ScriptNotFoundError(ScriptError):
    """The script path or module name does not exist."""


class NotPythonError(ScriptError):
    """The file exists but is not Python source (a notebook, a shell script, a binary...)."""


class WatchError(TrainmedicError):
    """A watch session was started twice, or stopped before it started."""


class MissingExtraError(TrainmedicError, ImportError):
    """An optional dependency is missing; the message names the ``pip install`` extra."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package {module!r}, which is not installed. "
            f"Install it with: pip install 'trainmedic[{extra}]'"
        )
        self.module = module
        self.extra = extra


def require(module: str, extra: str, purpose: str):
    """Import an optional dependency, or raise MissingExtraError naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(module, extra, purpose) from exc


def require_installed(module: str, extra: str, purpose: str) -> None:
    """Raise MissingExtraError naming the extra unless ``module`` is installed, without importing
    it: for a process that only starts others which import it (``import torch`` alone is 3 s)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtraError(module, extra, purpose)


class DataError(TrainmedicError):
    """``trainmedic.data`` cannot serve a source as asked."""


class SourceError(DataError):
    """The source cannot be opened or read: missing path, unknown kind, bad query."""


class FieldError(DataError):
    """A field is missing, ragged, of another length than the others, or of no numeric dtype."""


class TierError(DataError):
    """A forced tier does not fit; the message gives the sizes and the tier that would."""


class ResumeError(DataError):
    """A ``state_dict`` given to ``load_state_dict`` was taken from a different loader."""


class LintError(TrainmedicError):
    """``trainmedic lint`` was asked for a path that does not exist or a rule code it does not know."""


class PlanError(TrainmedicError):
    """``trainmedic plan`` cannot plan the build function as given (the message says why and the fix)."""


class DeviceError(TrainmedicError):
    """A GPU name the device catalog does not know, or one that fits several cards (names them all)."""


class CheckpointError(TrainmedicError):
    """A checkpoint directory cannot be written (unwritable, full), a save failed, or a bad argument."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint was taken from a different model/optimizer: the message names the mismatched keys."""


class PreflightError(TrainmedicError):
    """``trainmedic preflight`` cannot read the experiments it was given (bad table, bad budget)."""


class BatchError(TrainmedicError):
    """``trainmedic.batch`` cannot batch a function or run a generation job as asked (names the value)."""


class TuneError(TrainmedicError):
    """``trainmedic tune`` cannot measure as asked (names the bad value and the fix)."""


class AttachError(TrainmedicError):
    """``trainmedic attach`` cannot read the process it was given; the message says what to run instead."""

    #: The CLI's exit code: a usage error, like a script that does not exist.
    exit_code = 2


class Preempted(SystemExit):
    """The run stopped on purpose after its last save: a SIGTERM/SIGUSR1 or the deadline.

    A ``SystemExit`` so that ``finally`` blocks and context managers run and the process ends
    without a traceback; ``code`` is 128 + the signal number after a signal (what a wrapper sees
    from a process the signal ended) and 75 (EX_TEMPFAIL: try again) after the deadline.
    ``message`` says which checkpoint was written and how to resume.
    """

    def __init__(self, code: int, message: str, step: int, path: str) -> None:
        super().__init__(code)
        self.message = message
        self.step = step
        self.path = path

    def __str__(self) -> str:
        return self.message
