"""Deprecated: the checkpointer, the linter and preflight each have their own package now.

``trainmedic.guard`` held three products: ``Checkpointer`` and its records now live in
``trainmedic.checkpoint``, the linter in ``trainmedic.lint`` and preflight in
``trainmedic.preflight``. The old imports keep working and warn (DeprecationWarning) with the
new name; nothing in trainmedic imports this package.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import trainmedic.checkpoint as _checkpoint

#: The names ``trainmedic.guard`` exported, all from ``trainmedic.checkpoint`` now.
_CHECKPOINT_NAMES = tuple(_checkpoint.__all__)

__all__ = sorted(_CHECKPOINT_NAMES)


def __getattr__(name: str) -> Any:
    if name in _CHECKPOINT_NAMES:
        warnings.warn(
            f"trainmedic.guard.{name} moved to trainmedic.checkpoint.{name}; "
            f"import it from there (trainmedic.guard will be removed)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_checkpoint, name)
    if name in ("lint", "preflight"):
        return importlib.import_module(f"trainmedic.guard.{name}")
    raise AttributeError(f"module 'trainmedic.guard' has no attribute {name!r}")
