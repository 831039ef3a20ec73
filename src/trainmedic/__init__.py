"""trainmedic: make GPU training fast and keep it from crashing."""

import random as _random

# rich seeds its style ids from the global `random` stream when imported; importing trainmedic
# must not move a training script's seeded stream (an exact resume depends on it), so the state
# is put back once everything below is imported.
_random_state = _random.getstate()

from trainmedic._version import __version__
from trainmedic.errors import NotPythonError, ScriptError, ScriptNotFoundError, TrainmedicError, WatchError
from trainmedic.run.report.console import render_console
from trainmedic.run.report.html import render_html, write_html
from trainmedic.run.report.model import Finding, Report
from trainmedic.run.watch import Watch, step, watch

_random.setstate(_random_state)
del _random_state

__all__ = [
    "Finding",
    "NotPythonError",
    "Report",
    "ScriptError",
    "ScriptNotFoundError",
    "TrainmedicError",
    "Watch",
    "WatchError",
    "__version__",
    "render_console",
    "render_html",
    "step",
    "watch",
    "write_html",
]
