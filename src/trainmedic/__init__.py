"""trainmedic: make GPU training fast and keep it from crashing.

The public names load on first use (PEP 562): ``import trainmedic`` and every ``trainmedic``
command start without the watch, the report renderers and their numpy and rich, which a
``trainmedic lint`` or ``plan`` never needs.
"""

import importlib as _importlib
import random as _random

# rich seeds its style ids from the global `random` stream when rich.style is imported;
# importing trainmedic must not move a training script's seeded stream (an exact resume depends
# on it), so rich.style is imported here, once, with the state put back. Every later rich import
# finds it loaded.
_random_state = _random.getstate()
_importlib.import_module("rich.style")
_random.setstate(_random_state)
del _random_state

from trainmedic._version import __version__
from trainmedic.errors import (
    NotPythonError,
    ScriptError,
    ScriptNotFoundError,
    TrainmedicError,
    WatchError,
)

#: Public name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "Finding": "trainmedic.run.report.model",
    "Report": "trainmedic.run.report.model",
    "Watch": "trainmedic.run.watch",
    "render_console": "trainmedic.run.report.console",
    "render_html": "trainmedic.run.report.html",
    "step": "trainmedic.run.watch",
    "watch": "trainmedic.run.watch",
    "write_html": "trainmedic.run.report.html",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainmedic' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
