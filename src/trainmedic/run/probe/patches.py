"""Changes a probe makes to other modules, kept so they can all be undone.

:class:`Patches` records each attribute a probe replaces (a method of torch, Keras, h5py, ...)
and each post-import hook it waits on; ``undo()`` cancels the hooks still waiting and puts every
attribute back, newest first. :func:`after_import` runs a callback as soon as a module is
imported — at once if it already is — so that a script that never imports torch or Keras pays
nothing for their probes.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Callable
from typing import Any


class Patches:
    """What one probe changed; ``undo()`` reverts all of it."""

    def __init__(self) -> None:
        self._cancel: list[Callable[[], None]] = []
        self._restore: list[Callable[[], None]] = []

    def after_import(self, name: str, callback: Callable[[Any], None]) -> None:
        """:func:`after_import`, cancelled by ``undo()`` if the module was not imported by then."""
        self._cancel.append(after_import(name, callback))

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name`` to ``value`` until ``undo()``.

        An attribute ``owner`` only inherits (``Model.train_on_batch`` lives on the backend's
        trainer class) is deleted again, not copied onto ``owner``; one of its own is put back as
        it was stored (a staticmethod stays one).
        """
        own = name in getattr(owner, "__dict__", {})
        stored = owner.__dict__[name] if own else None
        setattr(owner, name, value)
        self._restore.append(lambda: setattr(owner, name, stored) if own else delattr(owner, name))

    def on_undo(self, restore: Callable[[], None]) -> None:
        """Also call ``restore`` at ``undo()`` (in reverse order with the replacements)."""
        self._restore.append(restore)

    def undo(self) -> None:
        for cancel in self._cancel:
            cancel()
        self._cancel.clear()
        for restore in reversed(self._restore):
            restore()
        self._restore.clear()


def after_import(name: str, callback: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``callback(module)`` now if ``name`` is imported, else right after it is.

    Returns a function that cancels a callback that has not run yet. A callback that raises is
    ignored: a probe must never break the user's import.
    """
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)
        return _nothing
    return _FINDER.add(name, callback)


def _nothing() -> None:
    pass


def _call(callback: Callable[[Any], None], module: Any) -> None:
    with contextlib.suppress(Exception):  # see after_import
        callback(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls the callbacks registered for a module right after it finishes importing.

    On ``sys.meta_path`` only while some callback waits; each name is hooked once.
    """

    def __init__(self) -> None:
        self._pending: dict[str, list[Callable[[Any], None]]] = {}

    def add(self, name: str, callback: Callable[[Any], None]) -> Callable[[], None]:
        self._pending.setdefault(name, []).append(callback)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

        def cancel() -> None:
            callbacks = self._pending.get(name)
            if callbacks is not None and callback in callbacks:
                callbacks.remove(callback)
                if not callbacks:
                    del self._pending[name]
            self._leave_if_idle()

        return cancel

    def _leave_if_idle(self) -> None:
        if not self._pending and self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        callbacks = self._pending.pop(fullname, None)
        if callbacks is None:
            return None
        self._leave_if_idle()  # also keeps the lookup below from finding us
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or isinstance(spec.loader, type):
            return spec  # a class-level loader (builtins) cannot be wrapped for one import only
        # The loader instance is made fresh for this one import, so wrapping its method is safe.
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_call(module: Any) -> None:
            exec_module(module)
            for callback in callbacks:
                _call(callback, module)

        loader.exec_module = exec_then_call
        return spec


_FINDER = _PostImportFinder()
