"""What a checkpoint takes from each object, and how it puts it back in place.

Anything with ``state_dict()``/``load_state_dict()`` (modules, optimizers, schedulers, AMP grad
scalers, ``trainmedic.data`` loaders, torchdata's StatefulDataLoader) is saved through them;
random generators through their own state calls; a sampler with ``set_epoch`` as its epoch and
seed; anything else as a pickled value. torch and NumPy are only touched when the caller's
process already imported them, so a NumPy-only script never pays for importing torch.
"""

from __future__ import annotations

import hashlib
import pickle
import random
import sys
from dataclasses import dataclass
from typing import Any

from trainmedic.errors import CheckpointError, CheckpointMismatchError

STATE_DICT, MODULE, TORCH_GENERATOR, NUMPY_GENERATOR, NUMPY_RANDOM_STATE, PY_RANDOM = (
    "state_dict",
    "module",
    "torch_generator",
    "numpy_generator",
    "numpy_random_state",
    "python_random",
)
SAMPLER, DATALOADER, VALUE = "sampler", "dataloader", "value"

_KEYS_SHOWN = 8


@dataclass(frozen=True)
class Captured:
    """One object's saved form: how it was taken (``kind``) and the state itself."""

    kind: str
    state: Any


def _torch() -> Any:
    return sys.modules.get("torch")


def _unwrap(obj: Any) -> Any:
    """The module under torch.compile (``_orig_mod``) and DataParallel/DDP (``module``).

    Saving the inner module keeps the keys free of ``_orig_mod.``/``module.`` prefixes, so a
    checkpoint from a compiled or wrapped model loads into a plain one and back.
    """
    torch = _torch()
    while True:
        inner = getattr(obj, "_orig_mod", None)
        if (
            inner is None
            and torch is not None
            and isinstance(obj, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel))
        ):
            inner = obj.module
        if inner is None:
            return obj
        obj = inner


def kind_of(obj: Any) -> str:
    """How ``obj`` is saved, told from its type alone (never asks it for its state)."""
    torch = _torch()
    numpy = sys.modules.get("numpy")
    if torch is not None and isinstance(obj, torch.nn.Module):
        return MODULE
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
        return STATE_DICT
    if torch is not None and isinstance(obj, torch.Generator):
        return TORCH_GENERATOR
    if numpy is not None and isinstance(obj, numpy.random.Generator):
        return NUMPY_GENERATOR
    if numpy is not None and isinstance(obj, numpy.random.RandomState):
        return NUMPY_RANDOM_STATE
    if isinstance(obj, random.Random):
        return PY_RANDOM
    if is_dataloader(obj):
        return DATALOADER
    if callable(getattr(obj, "set_epoch", None)) and hasattr(obj, "epoch"):
        return SAMPLER
    return VALUE


def capture(obj: Any) -> Captured:
    """The state to save for ``obj``; plain values are returned as themselves."""
    kind = kind_of(obj)
    if kind == MODULE:
        return Captured(kind, _unwrap(obj).state_dict())
    if kind == STATE_DICT:
        return Captured(kind, obj.state_dict())
    if kind == TORCH_GENERATOR:
        return Captured(kind, obj.get_state())
    if kind == NUMPY_GENERATOR:
        return Captured(kind, obj.bit_generator.state)
    if kind == NUMPY_RANDOM_STATE:
        return Captured(kind, obj.get_state())
    if kind == PY_RANDOM:
        return Captured(kind, obj.getstate())
    if kind == DATALOADER:
        return Captured(kind, _dataloader_state(obj))
    if kind == SAMPLER:
        return Captured(kind, {"epoch": int(obj.epoch), "seed": getattr(obj, "seed", None)})
    return Captured(VALUE, obj)


def is_torch_loader(obj: Any) -> bool:
    """Any torch DataLoader, torchdata's StatefulDataLoader included (torch only looked up if loaded)."""
    torch = _torch()
    return torch is not None and isinstance(obj, torch.utils.data.DataLoader)


def is_dataloader(obj: Any) -> bool:
    """A plain DataLoader: one without a state of its own."""
    return is_torch_loader(obj) and not callable(getattr(obj, "state_dict", None))


def type_name(obj: Any) -> str:
    """``torch.optim.adam.Adam``: what the manifest records, so a restore can name a swapped class."""
    kind = type(_unwrap(obj)) if kind_of(obj) == MODULE else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _dataloader_state(loader: Any) -> dict[str, Any]:
    """A plain DataLoader has no position to save: keep what fixes its order (sampler epoch, generator)."""
    state: dict[str, Any] = {}
    sampler = getattr(loader, "sampler", None)
    if sampler is not None and callable(getattr(sampler, "set_epoch", None)) and hasattr(sampler, "epoch"):
        state["sampler"] = {"epoch": int(sampler.epoch), "seed": getattr(sampler, "seed", None)}
    generator = getattr(loader, "generator", None) or getattr(sampler, "generator", None)
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def check(name: str, obj: Any, saved: Captured, where: str, saved_type: str | None = None) -> None:
    """Raise CheckpointMismatchError before anything is loaded when ``saved`` cannot fit ``obj``."""
    current = kind_of(obj)
    if current != saved.kind and saved.kind != VALUE:
        raise CheckpointMismatchError(
            f"{name!r} in {where} was saved from {saved_type or saved.kind} but the object given is "
            f"{type(obj).__name__} ({current}): pass the object it was saved from, or give this run a new directory."
        )
    if saved.kind == STATE_DICT and saved_type is not None and type_name(obj) != saved_type:
        # An Adam state loaded into SGD fails deep inside torch, after other objects were loaded.
        raise CheckpointMismatchError(
            f"{name!r} in {where} was saved from {saved_type} and the object given is {type_name(obj)}: build the "
            "same class as the run that saved it, or give this run a new directory."
        )
    if saved.kind == MODULE:
        _check_module(name, _unwrap(obj).state_dict(), saved.state, where)
    elif saved.kind == STATE_DICT and _is_optimizer(obj):
        _check_optimizer(name, obj.state_dict(), saved.state, where)


def _check_module(name: str, mine: dict[str, Any], saved: dict[str, Any], where: str) -> None:
    missing = [k for k in mine if k not in saved]
    unexpected = [k for k in saved if k not in mine]
    shapes = [
        f"{k} {tuple(saved[k].shape)} saved vs {tuple(mine[k].shape)} here"
        for k in mine
        if k in saved
        and hasattr(mine[k], "shape")
        and hasattr(saved[k], "shape")
        and tuple(mine[k].shape) != tuple(saved[k].shape)
    ]
    if not (missing or unexpected or shapes):
        return
    parts = []
    if missing:
        parts.append(f"missing from the checkpoint: {_some(missing)}")
    if unexpected:
        parts.append(f"in the checkpoint but not in this model: {_some(unexpected)}")
    if shapes:
        parts.append(f"different shapes: {_some(shapes)}")
    raise CheckpointMismatchError(
        f"{name!r} in {where} was saved from a different model — " + "; ".join(parts) + ". Build the model "
        "the checkpoint came from (same architecture and sizes), or give this run a new directory."
    )


def _is_optimizer(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.optim.Optimizer)


def _check_optimizer(name: str, mine: dict[str, Any], saved: Any, where: str) -> None:
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list):
        raise CheckpointMismatchError(
            f"{name!r} in {where} is not an optimizer state: pass the optimizer it was saved from."
        )
    have = [len(g["params"]) for g in mine["param_groups"]]
    got = [len(g["params"]) for g in groups]
    if have != got:
        raise CheckpointMismatchError(
            f"{name!r} in {where} was saved for parameter groups of sizes {got}, this optimizer has {have}: "
            "build the optimizer over the same parameters as the run that saved it, or give this run a new directory."
        )


def apply(name: str, obj: Any, saved: Captured, where: str) -> tuple[Any, str | None]:
    """Load ``saved`` into ``obj`` in place; return (value for immutables, note) — note when inexact."""
    kind, state = saved.kind, saved.state
    try:
        if kind == MODULE:
            _unwrap(obj).load_state_dict(state)
        elif kind == STATE_DICT:
            obj.load_state_dict(state)
            _settle_dataloader(obj)
        elif kind == TORCH_GENERATOR:
            obj.set_state(state)
        elif kind == NUMPY_GENERATOR:
            obj.bit_generator.state = state
        elif kind == NUMPY_RANDOM_STATE:
            obj.set_state(state)
        elif kind == PY_RANDOM:
            obj.setstate(state)
        elif kind == SAMPLER:
            _apply_sampler(name, obj, state, where)
        elif kind == DATALOADER:
            return None, _apply_dataloader(name, obj, state, where)
        else:
            return _apply_value(obj, state), None
    except _NotInPlace as exc:
        return state, (
            f"{name!r} was saved as {exc.args[0]} and the one given has {exc.args[1]}: it was left as it is; the saved "
            f"value is in ckpt.resumed.values[{name!r}]."
        )
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointMismatchError(
            f"cannot load {name!r} from {where}: {type(exc).__name__}: {exc}. Pass the object the checkpoint was "
            "saved from (same class and configuration), or give this run a new directory."
        ) from exc
    return None, None


class _NotInPlace(Exception):
    """An array or tensor that cannot take the saved one in place (other shape, dtype, read-only)."""


def _apply_sampler(name: str, sampler: Any, state: dict[str, Any], where: str) -> None:
    seed = getattr(sampler, "seed", None)
    if state.get("seed") is not None and seed is not None and seed != state["seed"]:
        raise CheckpointMismatchError(
            f"{name!r} in {where} was saved with seed={state['seed']} and this sampler has seed={seed}: "
            f"the data order would differ. Build it with seed={state['seed']}, or give this run a new directory."
        )
    sampler.set_epoch(state["epoch"])


def _apply_dataloader(name: str, loader: Any, state: dict[str, Any], where: str) -> str:
    if "sampler" in state:
        _apply_sampler(name, loader.sampler, state["sampler"], where)
    generator = getattr(loader, "generator", None) or getattr(loader.sampler, "generator", None)
    if "generator" in state and generator is not None:
        generator.set_state(state["generator"])
    epoch = state.get("sampler", {}).get("epoch")
    at = f"epoch {epoch}" if epoch is not None else "its epoch"
    return (
        f"{name!r} is a plain torch DataLoader, which cannot say how far into an epoch it was: it restarts "
        f"{at} from its first batch. For an exact mid-epoch resume use torchdata's StatefulDataLoader "
        "(a drop-in replacement) or trainmedic.data.load."
    )


def _apply_value(obj: Any, state: Any) -> Any:
    """Fill arrays, tensors, mutable containers and plain objects in place; hand every value back.

    An array or tensor of another shape or dtype cannot be filled: it is left as it is and the
    saved one is only in ``resumed.values`` (a note says so).
    """
    torch = _torch()
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray) and isinstance(state, numpy.ndarray):
        if obj.shape != state.shape or obj.dtype != state.dtype or not obj.flags.writeable:
            raise _NotInPlace(
                f"an array of shape {state.shape} and dtype {state.dtype}", f"{obj.shape} and {obj.dtype}"
            )
        obj[...] = state
    elif torch is not None and isinstance(obj, torch.Tensor) and isinstance(state, torch.Tensor):
        if obj.shape != state.shape or obj.dtype != state.dtype:
            raise _NotInPlace(
                f"a tensor of shape {tuple(state.shape)} and dtype {state.dtype}",
                f"{tuple(obj.shape)} and {obj.dtype}",
            )
        with torch.no_grad():
            obj.copy_(state)
    elif isinstance(obj, dict) and isinstance(state, dict):
        obj.clear()
        obj.update(state)
    elif isinstance(obj, list) and isinstance(state, list):
        obj[:] = state
    elif isinstance(obj, set) and isinstance(state, set):
        obj.clear()
        obj.update(state)
    elif type(obj) is type(state) and hasattr(obj, "__dict__") and not isinstance(obj, type):
        obj.__dict__.clear()
        obj.__dict__.update(state.__dict__)
    return state


def _settle_dataloader(loader: Any) -> None:
    """Build a restored StatefulDataLoader's iterator now, before the random streams are restored.

    A DataLoader iterator draws its base seed from torch's global generator when it is made. The
    interrupted run drew it at the start of the epoch, before the checkpoint; the resumed loop's
    first iter() would draw again after the restore and shift every later random number (dropout
    masks, augmentations). torchdata builds the resumed iterator on state_dict() and reuses it on
    the next iter(), so asking for the state here moves that draw before the RNG restore.
    """
    if is_torch_loader(loader):
        loader.state_dict()


def nbytes(state: Any) -> int:
    """Bytes of array data in a state (tensors and NumPy arrays); the rest is small."""
    torch = _torch()
    numpy = sys.modules.get("numpy")
    if torch is not None and isinstance(state, torch.Tensor):
        return state.nelement() * state.element_size()
    if numpy is not None and isinstance(state, numpy.ndarray):
        return int(state.nbytes)
    if isinstance(state, dict):
        return sum(nbytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(nbytes(v) for v in state)
    return 0


def digest(state: Any) -> str:
    """SHA-256 of a state's content: equal parameters and states give equal digests in any process."""
    hasher = hashlib.sha256()
    _feed(hasher, state)
    return hasher.hexdigest()


def _feed(hasher: Any, value: Any) -> None:
    torch = _torch()
    numpy = sys.modules.get("numpy")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        hasher.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.nelement() else b"")
    elif numpy is not None and isinstance(value, numpy.ndarray):
        hasher.update(f"A{value.dtype}{value.shape}".encode())
        hasher.update(numpy.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        hasher.update(b"{")
        for key in sorted(value, key=repr):
            hasher.update(repr(key).encode())
            _feed(hasher, value[key])
        hasher.update(b"}")
    elif isinstance(value, (list, tuple)):
        hasher.update(b"[" if isinstance(value, list) else b"(")
        for item in value:
            _feed(hasher, item)
        hasher.update(b"]")
    elif isinstance(value, (str, bytes, int, float, bool, complex, type(None))):
        hasher.update(repr(value).encode())
    elif hasattr(value, "__dict__"):
        hasher.update(type(value).__qualname__.encode())
        _feed(hasher, vars(value))
    else:
        hasher.update(pickle.dumps(value, protocol=4))


def _some(items: list[str]) -> str:
    shown = ", ".join(items[:_KEYS_SHOWN])
    return shown + (f" and {len(items) - _KEYS_SHOWN} more" if len(items) > _KEYS_SHOWN else "")
