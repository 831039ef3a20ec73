"""What makes a per-sample function the same function on a re-run: a digest of everything that
decides its outputs and can be seen from Python.

A resumed job appends to shards written by an earlier process, so the two must compute the
same thing. The function's source alone is not enough: ``functools.partial(f, offset=1000)`` and
a closure over ``offset`` change the outputs without changing a line, and code typed at a
prompt has no source at all. The digest covers the code (its bytecode and constants, nested
functions included), defaults, closure cells, the module-level values it reads by name, and for
a partial or a callable object the function behind it with its bound arguments or attributes.
Values are hashed by content (arrays and tensors by their bytes), never by ``repr`` with a
memory address, so the same job hashes the same in every process.

Not seen: files or databases the function reads, and modules it calls into (their versions are
the user's to keep; a changed helper in another module is not detected).
"""

from __future__ import annotations

import functools
import hashlib
import types
from typing import Any

import numpy as np
import torch

from trainmedic.data.sources.arrays import to_numpy

__all__ = ["function_digest"]

_MAX_DEPTH = 6


def function_digest(fn: Any) -> str:
    digest = hashlib.sha256()
    _feed(digest, fn, 0, set())
    return digest.hexdigest()


def _feed(digest: Any, value: Any, depth: int, seen: set[int]) -> None:
    update = digest.update
    if depth > _MAX_DEPTH or id(value) in seen:
        update(b"<deep>")
        return
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        update(f"{type(value).__name__}:{value!r};".encode())
        return
    if isinstance(value, (np.ndarray, torch.Tensor)):
        array = to_numpy(value)
        update(f"array:{array.dtype.str}:{array.shape};".encode())
        update(np.ascontiguousarray(array).data.cast("B"))
        return
    seen = seen | {id(value)}
    if isinstance(value, (tuple, list, set, frozenset)):
        update(f"{type(value).__name__}[{len(value)}]".encode())
        for item in sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value:
            _feed(digest, item, depth + 1, seen)
        return
    if isinstance(value, dict):
        update(f"dict[{len(value)}]".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key, depth + 1, seen)
            _feed(digest, value[key], depth + 1, seen)
        return
    if isinstance(value, functools.partial):
        update(b"partial:")
        for part in (value.func, value.args, value.keywords):
            _feed(digest, part, depth + 1, seen)
        return
    if isinstance(value, types.MethodType):
        update(b"method:")
        _feed(digest, value.__func__, depth + 1, seen)
        _feed(digest, _state(value.__self__), depth + 1, seen)
        return
    if isinstance(value, types.FunctionType):
        _feed_function(digest, value, depth, seen)
        return
    if isinstance(value, types.CodeType):
        _feed_code(digest, value, depth, seen)
        return
    if isinstance(value, (types.ModuleType, types.BuiltinFunctionType, type)):
        update(
            f"{type(value).__name__}:{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', getattr(value, '__name__', ''))};".encode()
        )
        return
    if callable(value) and not isinstance(value, type):
        # A callable object: its class's __call__ and its attributes.
        update(f"object:{type(value).__module__}.{type(value).__qualname__};".encode())
        _feed(digest, type(value).__call__, depth + 1, seen)
        _feed(digest, _state(value), depth + 1, seen)
        return
    update(f"other:{type(value).__module__}.{type(value).__qualname__};".encode())
    state = _state(value)
    if state:
        _feed(digest, state, depth + 1, seen)


def _feed_function(digest: Any, fn: types.FunctionType, depth: int, seen: set[int]) -> None:
    digest.update(f"function:{fn.__module__}.{fn.__qualname__};".encode())
    _feed_code(digest, fn.__code__, depth, seen)
    _feed(digest, fn.__defaults__, depth + 1, seen)
    _feed(digest, fn.__kwdefaults__, depth + 1, seen)
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell (a name assigned after the function was made)
            cells.append("<empty>")
    _feed(digest, cells, depth + 1, seen)
    # Module-level values the code reads by name: numbers, arrays, helper functions in the same
    # module. Modules and classes are named, not walked.
    names = sorted(_global_names(fn.__code__))
    module = fn.__module__
    read = {}
    for name in names:
        if name in fn.__globals__:
            value = fn.__globals__[name]
            if isinstance(value, types.FunctionType) and value.__module__ != module:
                read[name] = f"{value.__module__}.{value.__qualname__}"
            else:
                read[name] = value
    _feed(digest, read, depth + 1, seen)


def _feed_code(digest: Any, code: types.CodeType, depth: int, seen: set[int]) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(digest, const, depth + 1, seen)
        else:
            _feed(digest, const, depth + 1, seen)


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _state(value: Any) -> dict:
    try:
        state = vars(value)
    except TypeError:
        return {}
    return {k: v for k, v in state.items() if not k.startswith("__")}
