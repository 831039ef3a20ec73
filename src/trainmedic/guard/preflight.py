"""Deprecated: ``trainmedic.guard.preflight`` is ``trainmedic.preflight`` now; the old import warns and re-exports it."""

import warnings

from trainmedic.preflight import *  # noqa: F403 -- the old public names, unchanged
from trainmedic.preflight import __all__  # noqa: F401

warnings.warn(
    "trainmedic.guard.preflight moved to trainmedic.preflight; import it from there (trainmedic.guard will be removed)",
    DeprecationWarning,
    stacklevel=2,
)
