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

import gc
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from trainmedic.run.probe.clock import LOADER, OPTIMIZER, StepClock
from trainmedic.run.probe.patches import Patches


class TorchHooks:
    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.installed = False
        self._handles: list[Any] = []
        self._patches = Patches()
        self._optimizer_id: int | None = None
        self._root_models_hooked = False
        self.on_install: list[Callable[[Any], None]] = []
        #: First dimension of the root model's first input, over the first forwards: the batch
        #: size the model trains on, whatever produced the batch.
        self.batch_sizes: Counter[int] = Counter()

    def install(self) -> None:
        """Install now if torch (and trainmedic.data) is imported, else as soon as it is."""
        torch = sys.modules.get("torch")
        if torch is None:
            self._patches.after_import("torch", self._install)
        elif hasattr(torch, "optim"):  # not a torch that is still importing itself
            self._install(torch)
        self._patches.after_import("trainmedic.data.loader", self._install_data_loader)

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._patches.undo()
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
        self._patches.replace(owner, name, wrap(getattr(owner, name)))

    # -- hooks -------------------------------------------------------------------------------

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_id is None or self._optimizer_id == id(optimizer):
            self.clock.anchor(timed=True)

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
            clock.anchor(timed=True)
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
            m
            for m in gc.get_objects()
            if issubclass(type(m), module_type) and any(id(p) in params for p in m.parameters())
        ]
        children = {id(child) for m in modules for child in m.modules() if child is not m}
        for module in modules:
            if id(module) not in children:
                self._handles.append(module.register_forward_pre_hook(self._on_forward))

    def _on_forward(self, module: Any, args: Any) -> None:
        self.clock.anchor(timed=True)
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
