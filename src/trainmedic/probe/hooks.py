"""Zero-code-change hooks into PyTorch: step boundaries, anchors and data-loader waits.

Installed when torch is imported — at once if the script's environment already imported it,
otherwise by a post-import hook on ``torch`` — so that a script that never imports torch pays
nothing. Every hook is removed again by :meth:`TorchHooks.uninstall`.

What each hook costs per step: one optimizer pre/post hook call, one wrapper around the data
loader iterator's ``__next__`` (or around a ``trainmedic.data.Loader``'s batch generator: one
generator frame and one clock call per batch), one forward pre-hook on the root model. Nothing
per op, nothing per submodule.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.abc
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from trainmedic.probe.clock import LOADER, OPTIMIZER, StepClock


class TorchHooks:
    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.installed = False
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []
        self._optimizer_id: int | None = None
        self._root_models_hooked = False
        self._cancel: list[Callable[[], None]] = []
        self.on_install: list[Callable[[Any], None]] = []
        #: First dimension of the root model's first input, over the first forwards: the batch
        #: size the model trains on, whatever produced the batch.
        self.batch_sizes: Counter[int] = Counter()

    def install(self) -> None:
        """Install now if torch (and trainmedic.data) is imported, else as soon as it is."""
        torch = sys.modules.get("torch")
        if torch is None:
            self._cancel.append(after_import("torch", self._install))
        elif hasattr(torch, "optim"):  # not a torch that is still importing itself
            self._install(torch)
        self._cancel.append(after_import("trainmedic.data.loader", self._install_data_loader))

    def uninstall(self) -> None:
        for cancel in self._cancel:
            cancel()
        self._cancel.clear()
        for handle in self._handles:
            handle.remove()
        for restore in reversed(self._restore):
            restore()
        self._handles.clear()
        self._restore.clear()
        self.installed = False

    def _install(self, torch: Any) -> None:
        if self.installed:
            return
        self.installed = True
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )
        from torch.utils.data import dataloader

        self._handles.append(register_optimizer_step_pre_hook(self._before_optimizer_step))
        self._handles.append(register_optimizer_step_post_hook(self._after_optimizer_step))
        self._patch(dataloader._BaseDataLoaderIter, "__next__", self._wrap_next)
        self._patch(torch.autograd, "backward", self._wrap_anchor)
        for callback in self.on_install:
            callback(torch)

    def _install_data_loader(self, module: Any) -> None:
        # trainmedic.data.Loader is a plain iterable (no DataLoader iterator to hook): its
        # batches are counted by wrapping the generator __iter__ returns.
        self._patch(module.Loader, "__iter__", self._wrap_iter)

    def _patch(self, owner: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
        original = getattr(owner, name)
        setattr(owner, name, wrap(original))
        self._restore.append(lambda: setattr(owner, name, original))

    # -- hooks -------------------------------------------------------------------------------

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_id is None or self._optimizer_id == id(optimizer):
            self.clock.anchor()

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # With several optimizers (a GAN), the first one seen marks the steps.
        if self._optimizer_id is None:
            self._optimizer_id = id(optimizer)
        elif self._optimizer_id != id(optimizer):
            return
        if not self._root_models_hooked:
            self._root_models_hooked = True
            self._hook_root_models(optimizer)
        self.clock.boundary(OPTIMIZER)

    def _wrap_next(self, original: Callable) -> Callable:
        clock = self.clock

        def __next__(iterator: Any) -> Any:
            clock.boundary(LOADER)
            return original(iterator)

        return __next__

    def _wrap_iter(self, original: Callable) -> Callable:
        clock = self.clock

        def __iter__(loader: Any) -> Iterator[Any]:
            return _counted(original(loader), clock)

        __iter__.__wrapped__ = original  # type: ignore[attr-defined]
        __iter__.__doc__ = original.__doc__
        return __iter__

    def _wrap_anchor(self, original: Callable) -> Callable:
        clock = self.clock

        def anchored(*args: Any, **kwargs: Any) -> Any:
            clock.anchor()
            return original(*args, **kwargs)

        anchored.__wrapped__ = original  # type: ignore[attr-defined]
        anchored.__doc__ = original.__doc__
        return anchored

    def _hook_root_models(self, optimizer: Any) -> None:
        """Put one forward pre-hook on each model that owns the optimizer's parameters.

        A global module hook would fire for every submodule and push every module call off
        PyTorch's fast path; one hook on the root costs one call per forward.
        """
        import torch

        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        module_type = torch.nn.Module
        # type() rather than isinstance(): isinstance reads __class__, which wakes lazy
        # module proxies (and their deprecation warnings) all over the heap.
        modules = [
            m for m in gc.get_objects()
            if issubclass(type(m), module_type) and any(id(p) in params for p in m.parameters())
        ]
        children = {id(child) for m in modules for child in m.modules() if child is not m}
        for module in modules:
            if id(module) not in children:
                self._handles.append(module.register_forward_pre_hook(self._on_forward))

    def _on_forward(self, module: Any, args: Any) -> None:
        self.clock.anchor()
        if len(self.batch_sizes) < 4 and sum(self.batch_sizes.values()) < 32 and args:
            shape = getattr(args[0], "shape", None)
            if shape:
                self.batch_sizes[int(shape[0])] += 1

    def batch_size(self) -> int | None:
        """The batch size the model was called with most often, or None if it was never seen."""
        return self.batch_sizes.most_common(1)[0][0] if self.batch_sizes else None


def _counted(batches: Iterator[Any], clock: StepClock) -> Iterator[Any]:
    """Yield ``batches``, marking a loader step boundary each time the next batch is asked for.

    Like DataLoader's ``__next__`` hook, the boundary comes before the batch is fetched, so the
    wait for batch k is part of step k; the call that finds the epoch over marks one too."""
    try:
        while True:
            clock.boundary(LOADER)
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


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
