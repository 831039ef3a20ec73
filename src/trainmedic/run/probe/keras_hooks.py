"""Zero-code-change hooks into Keras 3: step boundaries, anchors and the batch size of ``fit``.

Keras never calls ``optimizer.step()`` of a torch optimizer, so the PyTorch hooks see no step in
a ``model.fit`` script; on the torch backend they would only see the DataLoader Keras builds
around the input. Every Keras backend, though, drives training through one
``keras.callbacks.CallbackList`` per ``fit``: ``on_train_batch_begin`` right before the train
step, ``on_train_batch_end`` right after it. Patching those two methods on the class (rather than
injecting a callback into ``fit``'s arguments) needs no argument juggling, works for a user's
own ``CallbackList`` and a ``Model`` subclass that overrides ``fit``, and leaves Keras's
asynchronous callback dispatch as it was (an extra callback with batch hooks turns it off).

Where the boundary sits: after the train step (``on_train_batch_end``). The next step then
opens with fetching its batch (before the anchor: batch preparation) and the train step anchors
it (``on_train_batch_begin``), the same shape as a PyTorch step that ends at
``optimizer.step()``. ``train_on_batch`` loops get the same: an anchor as the call starts, a
boundary as it returns.

Installed when ``keras`` is imported (a post-import hook), so a script that never imports Keras
pays nothing; :meth:`KerasHooks.uninstall` restores every patched attribute. Cost per step: two
wrapper calls and one clock call.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from trainmedic.run.probe.clock import KERAS, StepClock
from trainmedic.run.probe.patches import Patches

#: Forwards whose batch size is read: enough for a majority, few enough to cost nothing after.
_BATCH_PEEKS = 32


class KerasHooks:
    def __init__(self, clock: StepClock, batch_sizes: Counter[int] | None = None) -> None:
        self.clock = clock
        #: First dimension of the inputs of the first train steps. Shared with the torch hooks'
        #: counter when given, so one ``batch_size()`` answers for both frameworks.
        self.batch_sizes: Counter[int] = batch_sizes if batch_sizes is not None else Counter()
        self.installed = False
        self._patches = Patches()
        #: (model, our wrapper) for each train function wrapped, to put the original back.
        self._peeked: list[tuple[weakref.ref, Callable]] = []

    def install(self) -> None:
        """Install now if keras is imported, else as soon as it is."""
        self._patches.after_import("keras", self._install)

    def uninstall(self) -> None:
        self._patches.undo()
        for ref, wrapper in self._peeked:
            model = ref()
            if model is not None and getattr(model, "train_function", None) is wrapper:
                model.train_function = wrapper.__wrapped__
        self._peeked.clear()
        self.installed = False

    def _install(self, keras: Any) -> None:
        if self.installed:
            return
        callback_list = keras.callbacks.CallbackList
        self._patch(callback_list, "on_train_batch_begin", self._wrap_begin)
        self._patch(callback_list, "on_train_batch_end", self._wrap_end)
        self._patch(callback_list, "on_train_begin", self._wrap_train_begin)
        self._patch(keras.Model, "train_on_batch", self._wrap_train_on_batch)
        self.installed = True

    def _patch(self, owner: type, name: str, wrap: Callable[[Callable], Callable]) -> None:
        original = getattr(owner, name)
        wrapped = wrap(original)
        wrapped.__wrapped__ = original  # type: ignore[attr-defined]
        wrapped.__doc__ = getattr(original, "__doc__", None)
        self._patches.replace(owner, name, wrapped)

    # -- hooks -------------------------------------------------------------------------------

    def _wrap_begin(self, original: Callable) -> Callable:
        clock = self.clock

        def on_train_batch_begin(callbacks: Any, *args: Any, **kwargs: Any) -> Any:
            clock.anchor()
            return original(callbacks, *args, **kwargs)

        return on_train_batch_begin

    def _wrap_end(self, original: Callable) -> Callable:
        clock = self.clock

        def on_train_batch_end(callbacks: Any, *args: Any, **kwargs: Any) -> Any:
            clock.boundary(KERAS)  # before the progress bar and the user's callbacks: they open the next step
            return original(callbacks, *args, **kwargs)

        return on_train_batch_end

    def _wrap_train_begin(self, original: Callable) -> Callable:
        peek = self._peek

        def on_train_begin(callbacks: Any, *args: Any, **kwargs: Any) -> Any:
            # fit has built its train function by now (make_train_function runs first).
            model = getattr(callbacks, "model", None)
            function = getattr(model, "train_function", None)
            if model is not None and callable(function) and not getattr(function, "_trainmedic_peek", False):
                model.train_function = peek(model, function)
            return original(callbacks, *args, **kwargs)

        return on_train_begin

    def _wrap_train_on_batch(self, original: Callable) -> Callable:
        clock, sizes = self.clock, self.batch_sizes

        def train_on_batch(model: Any, *args: Any, **kwargs: Any) -> Any:
            clock.anchor()
            if sum(sizes.values()) < _BATCH_PEEKS:
                _count(sizes, args[0] if args else kwargs.get("x"))
            result = original(model, *args, **kwargs)
            clock.boundary(KERAS)
            return result

        return train_on_batch

    def _peek(self, model: Any, function: Callable) -> Callable:
        """``function`` (a model's train function), counting the batch size of its first calls.

        The batch is the last argument on every backend: ``[batch]`` on torch, ``(state, [batch])``
        on JAX; TensorFlow passes an iterator, which has no shape and is not counted.
        """
        sizes = self.batch_sizes

        def train_function(*args: Any, **kwargs: Any) -> Any:
            if args and sum(sizes.values()) < _BATCH_PEEKS:
                _count(sizes, args[-1])
            return function(*args, **kwargs)

        train_function._trainmedic_peek = True  # type: ignore[attr-defined]
        train_function.__wrapped__ = function  # type: ignore[attr-defined]
        try:
            self._peeked.append((weakref.ref(model), train_function))
        except TypeError:  # not weak-referenceable: left wrapped, a pass-through after the peeks
            pass
        return train_function

    def batch_size(self) -> int | None:
        """The batch size Keras trained on most often, or None if no train step was seen."""
        return self.batch_sizes.most_common(1)[0][0] if self.batch_sizes else None


def _count(sizes: Counter[int], batch: Any) -> None:
    size = _leading_dim(batch)
    if size is not None:
        sizes[size] += 1


def _leading_dim(value: Any, depth: int = 0) -> int | None:
    """The first dimension of the first array in a (nested) batch: ``[(x, y)]``, ``{"in": x}``."""
    if depth > 4 or value is None:
        return None
    shape = getattr(value, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else None
        except (TypeError, ValueError, IndexError):  # a symbolic dimension (None)
            return None
    if isinstance(value, dict):
        value = next(iter(value.values()), None)
        return _leading_dim(value, depth + 1)
    if isinstance(value, (list, tuple)) and value:
        return _leading_dim(value[0], depth + 1)
    return None
