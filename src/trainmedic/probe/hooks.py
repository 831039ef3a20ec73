"""Zero-code-change hooks into PyTorch: step boundaries, anchors and data-loader waits.

Installed when torch is imported — at once if the script's environment already imported it,
otherwise by a post-import hook on ``torch`` — so that a script that never imports torch pays
nothing. Every hook is removed again by :meth:`TorchHooks.uninstall`.

What each hook costs per step: one optimizer pre/post hook call, one wrapper around the data
loader iterator's ``__next__``, one forward pre-hook on the root model. Nothing per op, nothing
per submodule.
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.machinery
import sys
from typing import Any, Callable

from trainmedic.probe.clock import LOADER, OPTIMIZER, StepClock


class TorchHooks:
    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.installed = False
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []
        self._optimizer_id: int | None = None
        self._root_models_hooked = False
        self._finder: _PostImportFinder | None = None
        self.on_install: list[Callable[[Any], None]] = []

    def install(self) -> None:
        """Install now if torch is imported, else as soon as it is."""
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "optim"):
            self._install(torch)
        else:
            self._finder = _PostImportFinder("torch", self._install)
            sys.meta_path.insert(0, self._finder)

    def uninstall(self) -> None:
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
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


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after ``name`` finishes importing."""

    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot; also keeps the lookup below from finding us
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        # The loader instance is made fresh for this one import, so wrapping its method is safe.
        loader, callback = spec.loader, self.callback
        exec_module = loader.exec_module

        def exec_then_call(module: Any) -> None:
            exec_module(module)
            callback(module)

        loader.exec_module = exec_then_call
        return spec
