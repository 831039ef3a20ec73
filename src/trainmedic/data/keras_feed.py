"""A loader's batches as a ``keras.utils.PyDataset``, so ``model.fit`` trains on a memory tier.

    loader = data.load("signals.h5", fields=["x", "y"], batch_size=256, seed=0)
    model.fit(loader.keras(inputs="x", targets="y"), epochs=10, shuffle=False)

``len(feed)`` is the loader's batches per epoch and ``feed[i]`` is batch ``i`` of the current
epoch in the loader's seeded order, so every epoch serves every sample once, and epoch ``e``
serves exactly the batches ``loader.set_epoch(e); for batch in loader`` would. The current epoch
is the loader's own cursor (``loader.epoch``): once all of an epoch's batches have been served
the feed moves the loader to the next one (at Keras's ``on_epoch_end``, or as the next pass
begins). So ``loader.state_dict()`` taken in a callback resumes at the start of the epoch it names.

What counts is Keras's *passes* over the batches, not its epochs: Keras reads one batch to build
the model and drops that pass (two on TensorFlow, for the output signature), calls
``on_epoch_end`` before training as well, and with ``steps_per_epoch`` one pass spans several
Keras epochs. A pass is one generator of Keras's that calls ``feed[i]``: requests from a new
caller frame (or a batch index served again) begin a new pass, and only a pass that served every
batch ends the loader's epoch; a dropped pass is forgotten. Keep ``workers`` at 1 (the default
here): worker threads would make every request look like a pass of its own.

``fit``'s default ``shuffle=True`` permutes the order of whole batches with Python's ``random``;
each sample is still served once per epoch, but pass ``shuffle=False`` for the loader's exact
order (the loader already shuffled the samples). Requests in order are served from one running
pass over the tier; a request out of order restarts the pass at that batch (cheap on the RAM
and disk tiers, a fresh read-ahead on the stream tier).

Batches are the loader's tensors on the torch backend (on the loader's device) and NumPy arrays
on the others, arranged as Keras expects: ``(inputs,)``, ``(inputs, targets)`` or ``(inputs,
targets, sample_weights)``, each part an array, a tuple of arrays (several model inputs) or a
dict keyed by the model's input names.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

from trainmedic.data.order import batch_slices
from trainmedic.errors import DataError, FieldError, MissingExtraError, require

_FEED_CLASS: Any = None


def keras_dataset(
    loader: Any, inputs: Any = None, targets: Any = None, sample_weights: str | None = None
) -> Any:
    """``loader`` as a ``keras.utils.PyDataset`` for ``model.fit`` (see the module docstring).

    ``inputs`` / ``targets``: a field name, a list of names (a model with several inputs or
    outputs) or a dict of the model's input name -> field name. Without them, a loader of one
    field feeds inputs only and one of two fields feeds (first, second) as (inputs, targets);
    with only ``targets``, the other fields are the inputs. ``sample_weights``: a field name.
    """
    keras = import_keras("loader.keras()")
    fields = tuple(loader.fields)
    layout = _layout(fields, inputs, targets, sample_weights)
    backend = keras.backend.backend()
    numpy = backend != "torch"  # torch tensors are the torch backend's own
    device = getattr(loader, "device", None)
    if numpy and getattr(device, "type", None) == "cuda":
        # Every batch would go GPU -> host -> the other framework's GPU, and torch would hold
        # VRAM the backend (TensorFlow, JAX) preallocates for itself.
        raise DataError(
            f"the loader serves tensors on {device} but Keras runs on the {backend!r} backend, which takes NumPy "
            f"arrays from the host; build the loader with device='cpu' for loader.keras() (Keras moves each batch "
            f"to the GPU itself), or run Keras on the torch backend (KERAS_BACKEND=torch) to keep batches on {device}."
        )
    return _feed_class(keras)(loader, layout, numpy)


def import_keras(purpose: str) -> Any:
    """``import keras``; a missing package names the extra, a backend that cannot load the fix."""
    try:
        return require("keras", "keras", purpose)
    except MissingExtraError as exc:
        cause = exc.__cause__
        missing = getattr(cause, "name", None) or ""
        if missing == "keras" or missing.startswith("keras."):
            raise
        backend, origin = configured_backend()
        raise DataError(
            f"{purpose} needs Keras, which is installed, but `import keras` failed: {cause}. Keras loads its "
            f"backend {backend!r} (from {origin}) on import. Keras 3 runs on the torch that trainmedic already "
            f"uses: set KERAS_BACKEND=torch in the environment before Keras is first imported (e.g. "
            f"`KERAS_BACKEND=torch python train.py`), or install the {backend} backend."
        ) from cause


def configured_backend() -> tuple[str, str]:
    """(the backend Keras will load, where that choice comes from), as Keras itself reads it."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"], "KERAS_BACKEND"
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    path = os.path.join(home, "keras.json")
    try:
        with open(path, encoding="utf-8") as handle:
            backend = json.load(handle).get("backend")
    except (OSError, ValueError, AttributeError):
        backend = None
    if isinstance(backend, str) and backend:
        return backend, path
    return "tensorflow", "Keras's default"


def _feed_class(keras: Any) -> type:
    """The PyDataset subclass, defined once Keras is imported (it is an optional dependency)."""
    global _FEED_CLASS
    if _FEED_CLASS is None:
        # _Feed first: PyDataset's own __getitem__ and on_epoch_end are placeholders.
        class LoaderFeed(_Feed, keras.utils.PyDataset):
            def __init__(self, loader: Any, layout: tuple, numpy: bool) -> None:
                # No workers: a batch is one gather from the tier, there is nothing to overlap.
                keras.utils.PyDataset.__init__(self, workers=1, use_multiprocessing=False)
                _Feed.__init__(self, loader, layout, numpy)

        LoaderFeed.__module__ = __name__
        _FEED_CLASS = LoaderFeed
    return _FEED_CLASS


class _Feed:
    """The PyDataset protocol over a Loader: ``__len__``, ``__getitem__``, ``on_epoch_end``."""

    def __init__(self, loader: Any, layout: tuple, numpy: bool) -> None:
        self.loader = loader
        self._layout = layout
        self._numpy = numpy
        self._lock = threading.Lock()  # one tier pass and one pinned-buffer rotation, whoever calls
        self._epoch: int | None = None  # the epoch whose order is cached below
        self._order: Any = None
        self._served: set[int] = set()  # batch indices served in the current pass
        # The frame of the Keras generator making the pass. Held, not its id(): a dropped
        # generator's frame is freed and the next one may be allocated at the same address.
        self._pass: FrameType | None = None
        self._batches: Any = None  # a running pass over the tier, from batch ``_next`` on
        self._next = -1

    @property
    def epoch(self) -> int:
        """The loader epoch whose batches ``feed[i]`` serves."""
        return int(self.loader.epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"batch index {index!r} is a {type(index).__name__}; expected an int") from None
        n = len(self.loader)
        if not 0 <= index < n:
            raise IndexError(
                f"batch {index} is out of range: an epoch of this loader has {n} batches (0..{n - 1})"
            )
        caller = _caller(sys._getframe(1))
        with self._lock:
            self._sync_epoch()
            if caller is not self._pass or index in self._served:
                self._new_pass(caller)
            if self._batches is None or index != self._next:
                self._restart(index)
            batch = next(self._batches)
            self._next = index + 1
            self._served.add(index)
        return self._arrange(batch)

    def on_epoch_end(self) -> None:
        with self._lock:
            self._stop()  # frees a stream tier's read-ahead between epochs
            if self._complete():
                self._advance()

    # -- helpers -------------------------------------------------------------------------------

    def _complete(self) -> bool:
        return self._epoch == self.loader.epoch and len(self._served) >= len(self.loader)

    def _new_pass(self, caller: FrameType | None) -> None:
        if self._complete():
            self._advance()
        # A pass dropped before the end (the model-building read) leaves the epoch where it was.
        self._served, self._pass = set(), caller

    def _advance(self) -> None:
        self.loader.set_epoch(self.loader.epoch + 1)
        self._sync_epoch()

    def _sync_epoch(self) -> None:
        """Follow the loader's cursor, also when the user moved it (``set_epoch``) between fits."""
        epoch = self.loader.epoch
        if epoch != self._epoch:
            self._stop()
            self._epoch, self._order, self._served, self._pass = epoch, self.loader.order(epoch), set(), None

    def _restart(self, index: int) -> None:
        self._stop()
        loader = self.loader
        # The tier serves any slice of an epoch's order; the loader's own __iter__ would move its
        # position batch by batch and recompute the order at every out-of-order request.
        # len(order), not loader.length: on a multi-process run the order is this rank's shard.
        slices = batch_slices(len(self._order), loader.batch_size, loader.drop_last, index)
        self._batches = loader._tier.epoch(self._order, slices)
        self._next = index

    def _stop(self) -> None:
        if self._batches is not None:
            self._batches.close()
            self._batches = None

    def _arrange(self, batch: tuple[Any, ...]) -> tuple[Any, ...]:
        if self._numpy:
            batch = tuple(t.detach().cpu().numpy() for t in batch)
        return tuple(_pick(batch, part) for part in self._layout)


def _caller(frame: FrameType | None) -> FrameType | None:
    """The frame asking for a batch, past ``__getitem__`` overrides of a subclass: Keras's pass
    generator (one frame object for its whole pass), or the user's loop."""
    while frame is not None and frame.f_code.co_name == "__getitem__":
        frame = frame.f_back
    return frame


def _pick(batch: tuple[Any, ...], part: Any) -> Any:
    if isinstance(part, int):
        return batch[part]
    if isinstance(part, dict):
        return {name: batch[i] for name, i in part.items()}
    return tuple(batch[i] for i in part)


def _layout(fields: tuple[str, ...], inputs: Any, targets: Any, sample_weights: Any) -> tuple:
    """Positions of the (inputs, targets, sample_weights) fields in the loader's batch tuple:
    per part, one position (an array), a tuple of them (several arrays) or a dict (named inputs)."""
    if inputs is None and targets is None and sample_weights is None:
        if len(fields) > 2:
            raise FieldError(
                f"the loader serves {len(fields)} fields {list(fields)}; Keras needs to know which are the model's "
                f"inputs and which its targets: pass loader.keras(inputs=..., targets=...), e.g. "
                f"inputs={list(fields[:-1])!r}, targets={fields[-1]!r}."
            )
        inputs, targets = fields[0], (fields[1] if len(fields) == 2 else None)
    elif inputs is None:
        used = set(_names("targets", targets)) | set(_names("sample_weights", sample_weights))
        rest = [f for f in fields if f not in used]
        if not rest:
            raise FieldError(
                f"targets={targets!r} and sample_weights={sample_weights!r} use every field of the loader "
                f"{list(fields)}; none is left for the model's inputs: pass inputs=..."
            )
        inputs = rest[0] if len(rest) == 1 else rest
    parts = [_positions("inputs", inputs, fields)]
    if targets is not None or sample_weights is not None:
        parts.append(_positions("targets", targets, fields) if targets is not None else None)
    if sample_weights is not None:
        if not isinstance(sample_weights, str):
            raise FieldError(
                f"sample_weights={sample_weights!r}; expected the name of one field of {list(fields)}"
            )
        parts.append(_positions("sample_weights", sample_weights, fields))
    return tuple(parts)


def _names(role: str, spec: Any) -> list[str]:
    if spec is None:
        return []
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, Mapping):
        return list(spec.values())
    if isinstance(spec, Sequence):
        return list(spec)
    raise FieldError(
        f"{role}={spec!r} is a {type(spec).__name__}; expected a field name, a list of field names, or a dict "
        f"of the model's input name -> field name"
    )


def _positions(role: str, spec: Any, fields: tuple[str, ...]) -> Any:
    names = _names(role, spec)
    if not names:
        raise FieldError(f"{role}={spec!r} names no field; expected one or more of {list(fields)}")
    for name in names:
        if not isinstance(name, str) or name not in fields:
            raise FieldError(
                f"{role} names the field {name!r}, which this loader does not serve; its fields are {list(fields)} "
                f"(the fields= given to data.load)"
            )
    if isinstance(spec, str):
        return fields.index(spec)
    if isinstance(spec, Mapping):
        return {str(key): fields.index(name) for key, name in spec.items()}
    return tuple(fields.index(name) for name in names)
