"""Exceptions raised by trainmedic's library layers.

The library never prints and never exits; it raises one of these, and ``cli/`` turns them into
a message and an exit code. Every message names the bad value, what was expected, and the fix.

    TrainmedicError
    ├── ScriptError            the thing to run cannot be run
    │   ├── ScriptNotFoundError
    │   └── NotPythonError
    └── WatchError             a watch session was used the wrong way
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
