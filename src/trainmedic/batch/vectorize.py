"""A per-sample function turned into one call over a whole batch.

10k samples generated one at a time are 70,000 single-sample GPU calls; one call per 256 samples
is the fix. ``vectorize(fn)`` writes that batched call for the user: ``torch.func.vmap`` runs ``fn``'s
own code once on ``[batch, ...]`` tensors. Code vmap cannot batch (a Python ``if`` on a tensor,
``.item()``, NumPy, boolean-mask indexing) runs sample by sample instead, and the warning says
why and at which line of the user's code, so the fix is one edit away.

Random draws: a function that takes an ``rng`` argument gets a :class:`~trainmedic.batch.rng.Rng`
per sample, keyed by ``(seed, start + i)``: the batched output equals the per-sample calls
exactly. A function that draws from torch's global generator (``torch.randn``) is batched with
``randomness="different"`` and says so in ``notes``: its numbers depend on the batch size.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import operator
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from trainmedic.batch.rng import Rng, sample_keys
from trainmedic.data.sources.arrays import to_numpy
from trainmedic.errors import BatchError
from trainmedic.userfiles import is_user_file, shown_path

__all__ = ["FallbackWarning", "Vectorized", "vectorize"]

VMAP = "vmap"
LOOP = "loop"

#: vmap's messages, and what each means for the user's code: (text in the error, why, the fix).
_VMAP_LIMITS = (
    (
        "data-dependent control flow",
        "data-dependent control flow",
        "use torch.where or a mask instead of if/while on a tensor",
    ),
    (".item()", "a .item() call", "keep the value a tensor (no .item(), float() or int() on it)"),
    (
        "dynamic shape",
        "an output whose shape depends on the values",
        "use fixed shapes (torch.where with a fill value) instead of a boolean mask",
    ),
    (
        "doesn't have storage",
        "NumPy or another library that reads the tensor's memory",
        "write it with torch ops",
    ),
    ("has no attribute 'astype'", "NumPy code (NumPy has no vmap)", "write it with torch ops"),
    (
        "inplace arithmetic",
        "an in-place write into a tensor made outside the function",
        "make the result a new tensor",
    ),
)
_RANDOMNESS = "randomness error mode"


class FallbackWarning(UserWarning):
    """A function vmap cannot batch runs one sample at a time; the message says why and where."""


class Vectorized:
    """``fn`` over a batch: ``vf(*columns, seed=0, start=0, **columns)``, every argument with one
    row per sample along dim 0; returns ``fn``'s outputs stacked along dim 0.

    ``mode`` is "vmap" or "loop" once the first call has shown which works; ``reason`` says
    why a loop (None under vmap); ``notes`` holds what a user should know (global random draws).
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise BatchError(
                f"vectorize() needs a function of one sample; got {fn!r}, a {type(fn).__name__}."
            )
        self.fn = fn
        self.name = _name(fn)
        arguments = _argument_names(fn)
        self.takes_rng = "rng" in arguments
        for reserved in ("seed", "start"):
            if reserved in arguments:
                raise BatchError(
                    f"{self.name} has an argument named {reserved!r}, which a batched call keeps for itself "
                    f"(the job's seed and the index of the first sample); rename that argument."
                )
        self.mode: str | None = None
        self.reason: str | None = None
        self.notes: list[str] = []
        self._randomness = "error"
        self._numpy = False
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, seed: int = 0, start: int = 0, **kwargs: Any) -> Any:
        seed, start = whole_number("seed", seed), whole_number("start", start)
        size = batch_length(args, kwargs, self.name)
        if self.mode == LOOP:
            return self._loop(args, kwargs, size, seed, start)
        tensors = [_as_tensor(a, f"argument {i}") for i, a in enumerate(args)]
        named = {k: _as_tensor(v, f"argument {k!r}") for k, v in kwargs.items()}
        try:
            out = self._vmap(tensors, named, size, seed, start)
        except Exception as exc:
            if self.mode == VMAP:
                raise
            self._fall_back(exc, args, kwargs, seed, start)
            return self._loop(args, kwargs, size, seed, start)
        self.mode = VMAP
        return out

    @property
    def numpy(self) -> bool:
        """True once the function showed it is NumPy code: the loop then passes NumPy rows."""
        return self._numpy

    def without_fallback(self) -> Vectorized:
        """A twin that batches the way this one settled and raises where this one would fall
        back: sizing measures its memory, which a silent fallback to the loop would falsify."""
        twin = Vectorized(self.fn)
        twin.mode, twin._randomness = VMAP, self._randomness
        return twin

    def one(self, index: int, *args: Any, seed: int = 0, **kwargs: Any) -> Any:
        """``fn`` on sample ``index`` alone, with the same random stream the batch gives it:
        the reference a batched result is checked against."""
        if self.takes_rng:
            kwargs["rng"] = Rng(seed, index, device=_device_of(args, kwargs))
        return self.fn(*args, **kwargs)

    # -- the two ways to run -----------------------------------------------------------------

    def _vmap(self, args: list, kwargs: dict, size: int, seed: int, start: int) -> Any:
        fn, takes_rng = self.fn, self.takes_rng
        keys = sample_keys(seed, torch.arange(start, start + size, device=_device_of(args, kwargs)))

        def one_sample(key, args, kwargs):
            if takes_rng:
                kwargs = {**kwargs, "rng": Rng.from_key(key)}
            return fn(*args, **kwargs)

        try:
            return torch.func.vmap(one_sample, randomness=self._randomness)(keys, args, kwargs)
        except RuntimeError as exc:
            if _RANDOMNESS not in str(exc) or self._randomness != "error":
                raise
        # Draws from torch's global generator: batchable, but not equal to per-sample calls.
        self._randomness = "different"
        self.notes.append(
            f"{self.name} draws from torch's global random generator (torch.randn and friends): its batched "
            f"draws differ from per-sample calls and change with the batch size; take an `rng` argument and "
            f"draw with rng.normal(...) for draws that do not"
        )
        return torch.func.vmap(one_sample, randomness="different")(keys, args, kwargs)

    def _loop(self, args: tuple, kwargs: dict, size: int, seed: int, start: int) -> Any:
        if self._numpy:
            args, kwargs = tuple(to_numpy(a) for a in args), {k: to_numpy(v) for k, v in kwargs.items()}
        else:
            args = tuple(_as_tensor(a, f"argument {i}") for i, a in enumerate(args))
            kwargs = {k: _as_tensor(v, f"argument {k!r}") for k, v in kwargs.items()}
        outputs = [
            self.one(start + i, *(a[i] for a in args), seed=seed, **{k: v[i] for k, v in kwargs.items()})
            for i in range(size)
        ]
        return stack_samples(outputs, self.name, start)

    def _fall_back(self, exc: Exception, args: tuple, kwargs: dict, seed: int, start: int) -> None:
        message = str(exc)
        frame = _user_frame(exc, self.fn)
        why = fix = None
        for text, meaning, remedy in _VMAP_LIMITS:
            if text in message:
                why, fix = meaning, remedy
                break
        numpy = _numpy_frame(exc)
        if not numpy and (why is None or why.startswith("NumPy")):
            # Not one of vmap's limits that tensor code hits: run the first sample alone. If it
            # runs on tensors, vmap is to blame; if only on NumPy values, it is NumPy code (which
            # may fail on a tensor before NumPy is entered: `np.arange(4) * freq`); if neither,
            # the error is the function's own and is raised as a per-sample call raises it.
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # NumPy's complaints about tensors it was handed
                    self._loop(_rows(args, 1), _rows(kwargs, 1), 1, seed, start)
            except Exception:
                if not self._runs_on_numpy_rows(args, kwargs, seed, start):
                    raise
                numpy = True
        if numpy:
            self._numpy = True
            why, fix = "NumPy code (NumPy has no vmap)", "write it with torch ops"
        elif why is None:
            why, fix = (
                f"it ({type(exc).__name__}: {message.splitlines()[0] if message else ''})",
                "see that message",
            )
        self.mode = LOOP
        self.reason = (
            f"{self.name} runs one sample at a time: vmap cannot batch {why}{frame}; to batch it, {fix}"
        )
        warnings.warn(self.reason, FallbackWarning, stacklevel=3)

    def _runs_on_numpy_rows(self, args: tuple, kwargs: dict, seed: int, start: int) -> bool:
        """Whether the first sample, given as NumPy values, runs: NumPy code such as
        ``np.arange(4) * freq`` fails on a tensor before NumPy is ever entered."""
        first_args = tuple(to_numpy(a)[0] for a in args)
        first_kwargs = {k: to_numpy(v)[0] for k, v in kwargs.items()}
        try:
            self.one(start, *first_args, seed=seed, **first_kwargs)
        except Exception:  # noqa: BLE001 - not NumPy code after all: the tensor error stands
            return False
        return True

    def __repr__(self) -> str:
        return f"<Vectorized {self.name} mode={self.mode or 'untried'}>"


def vectorize(fn: Callable[..., Any]) -> Vectorized:
    """The batched version of a per-sample function; see :class:`Vectorized`.

    ::

        gen = batch.vectorize(iq_sample)            # iq_sample(freq, snr_db, rng) -> [7, 1024]
        iq = gen(freq=freqs, snr_db=snrs, seed=0)   # [N, 7, 1024] in one call
    """
    return fn if isinstance(fn, Vectorized) else Vectorized(fn)


# -- helpers ----------------------------------------------------------------------------------


def batch_length(args: tuple, kwargs: dict, name: str) -> int:
    """The common number of rows of every argument, or BatchError naming the ones that differ."""
    lengths: dict[str, int] = {}
    for label, value in [
        *((f"argument {i}", a) for i, a in enumerate(args)),
        *((repr(k), v) for k, v in kwargs.items()),
    ]:
        shape = getattr(value, "shape", None)
        if shape is None:
            try:
                lengths[label] = len(value)
            except TypeError:
                raise BatchError(
                    f"{label} of {name} is {value!r}, a single value; every argument of a batched call needs one "
                    f"row per sample. Bind constants with functools.partial({name}, ...)."
                ) from None
        elif len(shape) == 0:
            raise BatchError(
                f"{label} of {name} is a 0-d value; every argument of a batched call needs one row per sample. "
                f"Bind constants with functools.partial({name}, ...)."
            )
        else:
            lengths[label] = int(shape[0])
    if not lengths:
        raise BatchError(f"a batched call of {name} needs at least one argument with one row per sample.")
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{label}: {n}" for label, n in lengths.items())
        raise BatchError(
            f"the arguments of {name} have different numbers of samples ({listed}); give each one row per sample."
        )
    size = next(iter(lengths.values()))
    if size == 0:
        raise BatchError(f"a batched call of {name} got 0 samples; give at least one.")
    return size


def stack_samples(outputs: list[Any], name: str, start: int = 0) -> Any:
    """Stack per-sample outputs leaf by leaf; a leaf whose shape changes between samples is named."""
    flat = [tree_flatten(out) for out in outputs]
    spec = flat[0][1]
    for i, (_, other) in enumerate(flat):
        if other != spec:
            raise BatchError(
                f"{name} returned a different structure for sample {start + i} than for sample {start}; "
                f"a batched function must return the same tensors for every sample."
            )
    stacked: list[torch.Tensor | np.ndarray] = []
    for leaf in range(len(flat[0][0])):
        values = [leaves[leaf] for leaves, _ in flat]
        shapes = [tuple(np.shape(v)) for v in values]
        odd = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
        if odd is not None:
            raise BatchError(
                f"{name} returned shape {shapes[0]} for sample {start} but {shapes[odd]} for sample {start + odd} "
                f"(output {leaf}); samples of one dataset need one shape: pad or crop to a fixed size."
            )
        if all(isinstance(v, torch.Tensor) for v in values):
            stacked.append(torch.stack(values))
        else:
            stacked.append(np.stack([to_numpy(v) for v in values]))
    return tree_unflatten(stacked, spec)


def _name(fn: Callable) -> str:
    inner = fn.func if isinstance(fn, functools.partial) else fn
    return getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or type(inner).__name__


def _as_tensor(value: Any, label: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise BatchError(
            f"{label} cannot become a tensor ({exc}); give numbers, arrays or tensors."
        ) from None


def whole_number(name: str, value: Any) -> int:
    """``value`` as an int (NumPy integers too), or BatchError naming it; a bool is no number here."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise BatchError(f"{name}={value!r} is a {type(value).__name__}; expected an int.") from None


def _device_of(args: Any, kwargs: dict) -> torch.device:
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def _argument_names(fn: Callable) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(exc.__traceback__))


def _user_frame(exc: BaseException, fn: Callable) -> str:
    """' at file:line (`source`)' of the innermost frame in the user's code, '' when none."""
    own = getattr(getattr(fn, "__code__", None), "co_filename", None)
    for frame in reversed(_frames(exc)):
        if frame.filename == own or is_user_file(frame.filename):
            source = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
            where = f"{shown_path(frame.filename)}:{frame.lineno}"
            return f" at {where} (`{source}`)" if source else f" at {where}"
    return ""


def _numpy_frame(exc: BaseException) -> bool:
    return any("/numpy/" in frame.filename.replace("\\", "/") for frame in _frames(exc))


def _rows(values: Any, count: int) -> Any:
    if isinstance(values, dict):
        return {k: v[:count] for k, v in values.items()}
    return tuple(v[:count] for v in values)
