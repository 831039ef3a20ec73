"""trainmedic: make GPU training fast and keep it from crashing."""

from trainmedic._version import __version__
from trainmedic.errors import NotPythonError, ScriptError, ScriptNotFoundError, TrainmedicError, WatchError
from trainmedic.report.console import render_console
from trainmedic.report.html import render_html, write_html
from trainmedic.report.model import Finding, Report
from trainmedic.watch import Watch, step, watch

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
