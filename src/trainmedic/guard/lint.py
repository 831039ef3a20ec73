"""Deprecated: ``trainmedic.guard.lint`` is ``trainmedic.lint`` now; the old import warns and re-exports it."""

import warnings

from trainmedic.lint import *  # noqa: F403 -- the old public names, unchanged
from trainmedic.lint import __all__  # noqa: F401

warnings.warn(
    "trainmedic.guard.lint moved to trainmedic.lint; import it from there (trainmedic.guard will be removed)",
    DeprecationWarning,
    stacklevel=2,
)
