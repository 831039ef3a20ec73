"""Config trees that record reads and writes per dotted key: TrackedDict, TrackedList.

Loaded inside every preflight child before the user's code (see configs.py, which wraps each
tracked file's tree with :func:`wrap`); the standard library only, nothing from trainmedic. What
counts as a read or a write is listed in configs.py's docstring.
"""

from __future__ import annotations

import copy

# Not typing.TYPE_CHECKING: this module loads before the user's code and imports no more than
# it needs (type checkers read a module-level TYPE_CHECKING as True all the same).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import SupportsIndex

MAX_NODES = 50_000
_MISSING = object()


def short_repr(value: object, limit: int = 200) -> str:
    """``repr`` of a config value, cut at ``limit`` characters, without recording reads."""
    try:
        text = _repr(value, 3)
    except Exception:  # noqa: BLE001 - a user object's broken __repr__ must not break their run
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _repr(value: object, depth: int) -> str:
    # dict.items / list.__iter__ directly: formatting a value must not count as reading it.
    if isinstance(value, dict) and type(value) in (dict, TrackedDict):
        if depth == 0:
            return "{...}" if value else "{}"
        parts = [f"{_repr(k, 0)}: {_repr(v, depth - 1)}" for k, v in list(dict.items(value))[:20]]
        return "{" + ", ".join(parts) + (", ...}" if len(value) > 20 else "}")
    if isinstance(value, list) and type(value) in (list, TrackedList):
        if depth == 0:
            return "[...]" if value else "[]"
        parts = [_repr(v, depth - 1) for v in list(list.__iter__(value))[:20]]
        return "[" + ", ".join(parts) + (", ...]" if len(value) > 20 else "]")
    if isinstance(value, str) and len(value) > 400:
        return repr(value[:400])
    return repr(value)


def _join(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


class _FileRecord:
    """What happened to one config file: its keys as loaded, and every read and write."""

    __slots__ = ("keys", "read", "sets", "copied")

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}  # leaf path -> repr as loaded
        self.read: set[str] = set()
        # path -> [old repr | None (missing), new repr | None (deleted), op, writes, read_before, read_after]
        self.sets: dict[str, list] = {}
        self.copied = False

    def on_read(self, path: str) -> None:
        self.read.add(path)
        entry = self.sets.get(path)
        if entry is not None:
            entry[5] = True

    def on_write(self, path: str, old: object, new: object, op: str) -> None:
        entry = self.sets.get(path)
        new_repr = None if new is _MISSING else short_repr(new)
        if entry is None:
            old_repr = None if old is _MISSING else old if op == "list" else short_repr(old)
            self.sets[path] = [old_repr, new_repr, "set" if op == "list" else op, 1, path in self.read, False]
        else:
            entry[1], entry[3], entry[5] = new_repr, entry[3] + 1, False
            entry[2] = "set" if op == "list" else op


class TrackedDict(dict):
    """A ``dict`` that records reads and writes of its keys into its file's record."""

    __slots__ = ("_tm_rec", "_tm_paths")
    _tm_rec: _FileRecord | None
    _tm_paths: tuple[str, ...]  # every dotted path this node is loaded at (YAML anchors share nodes)

    def __new__(cls, *args: object, **kwargs: object) -> TrackedDict:
        self = dict.__new__(cls)
        self._tm_rec, self._tm_paths = None, ()
        return self

    def _tm_read(self, key: object) -> None:
        rec = self._tm_rec
        if rec is not None:
            for prefix in self._tm_paths:
                rec.on_read(_join(prefix, key))

    def _tm_write(self, key: object, old: object, new: object, op: str) -> None:
        rec = self._tm_rec
        if rec is not None:
            for prefix in self._tm_paths:
                rec.on_write(_join(prefix, key), old, new, op)

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        self._tm_read(key)
        return value

    # Overriding __iter__ (same behaviour) makes CPython's dict(x), {**x}, f(**x) and x | y take
    # the keys() + x[k] path instead of copying the hash table behind our back.
    def __iter__(self):
        return dict.__iter__(self)

    def get(self, key, default=None):
        if dict.__contains__(self, key):
            self._tm_read(key)
            return dict.__getitem__(self, key)
        return default

    def items(self):
        for key in list(dict.__iter__(self)):
            self._tm_read(key)
        return dict.items(self)

    def values(self):
        for key in list(dict.__iter__(self)):
            self._tm_read(key)
        return dict.values(self)

    def setdefault(self, key, default=None):
        if dict.__contains__(self, key):
            self._tm_read(key)
            return dict.__getitem__(self, key)
        self._tm_write(key, _MISSING, default, "default")
        dict.__setitem__(self, key, default)
        self._tm_read(key)  # the caller gets the value back and uses it
        return default

    def __setitem__(self, key, value):
        old = dict.get(self, key, _MISSING)
        # `cfg["optim"] |= x` stores the same container back: its own change is already recorded.
        if old is not value or not isinstance(value, (TrackedDict, TrackedList)):
            self._tm_write(key, old, value, "set")
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        old = dict.__getitem__(self, key)
        dict.__delitem__(self, key)
        self._tm_write(key, old, _MISSING, "del")

    def pop(self, key, *default):
        if dict.__contains__(self, key):
            self._tm_read(key)
            value = dict.pop(self, key)
            self._tm_write(key, value, _MISSING, "del")
            return value
        return dict.pop(self, key, *default)

    def popitem(self):
        key, value = dict.popitem(self)
        self._tm_read(key)
        self._tm_write(key, value, _MISSING, "del")
        return key, value

    def clear(self):
        for key, value in list(dict.items(self)):
            self._tm_write(key, value, _MISSING, "del")
        dict.clear(self)

    def update(self, *args, **kwargs):
        # dict.update into a plain dict first: the same argument checks and error messages.
        pending: dict = {}
        dict.update(pending, *args, **kwargs)
        for key, value in dict.items(pending):
            self[key] = value

    # mypy matches an in-place method only against a forward one that is not overloaded, and
    # typeshed overloads dict.__or__: this signature is the one ``|=`` has on a dict.
    def __ior__(self, other: object, /) -> TrackedDict:  # type: ignore[misc]
        self.update(other)
        return self

    def copy(self):
        return _tracked_like(self, TrackedDict(), list(dict.items(self)))

    __copy__ = copy

    def __deepcopy__(self, memo):
        new = memo[id(self)] = TrackedDict()
        for key, value in list(dict.items(self)):
            dict.__setitem__(new, copy.deepcopy(key, memo), copy.deepcopy(value, memo))
        return _tracked_like(self, new, ())

    def __reduce_ex__(self, protocol):
        if self._tm_rec is not None:
            self._tm_rec.copied = True
        return (dict, (), None, None, iter(list(dict.items(self))))


class TrackedList(list):
    """A ``list`` whose every access reads it as one setting and every change writes it."""

    __slots__ = ("_tm_rec", "_tm_paths")
    _tm_rec: _FileRecord | None
    _tm_paths: tuple[str, ...]

    def __new__(cls, *args: object, **kwargs: object) -> TrackedList:
        self = list.__new__(cls)
        self._tm_rec, self._tm_paths = None, ()
        return self

    def _tm_read(self) -> None:
        rec = self._tm_rec
        if rec is not None:
            for prefix in self._tm_paths:
                rec.on_read(prefix)

    def _tm_change(self, method, *args):
        rec = self._tm_rec
        if rec is None:
            return method(self, *args)
        old = short_repr(self) if any(p not in rec.sets for p in self._tm_paths) else None
        result = method(self, *args)
        for prefix in self._tm_paths:
            rec.on_write(prefix, old, self, "list")
        return result

    def __getitem__(self, index):
        self._tm_read()
        return list.__getitem__(self, index)

    def __iter__(self):
        self._tm_read()
        return list.__iter__(self)

    def __reversed__(self):
        self._tm_read()
        return list.__reversed__(self)

    def __contains__(self, value):
        self._tm_read()
        return list.__contains__(self, value)

    def index(self, *args):
        self._tm_read()
        return list.index(self, *args)

    def count(self, value):
        self._tm_read()
        return list.count(self, value)

    def pop(self, *args):
        self._tm_read()
        return self._tm_change(list.pop, *args)

    def __setitem__(self, index, value):
        return self._tm_change(list.__setitem__, index, value)

    def __delitem__(self, index):
        return self._tm_change(list.__delitem__, index)

    # As for TrackedDict.__ior__: typeshed overloads list.__add__, which mypy cannot match against.
    def __iadd__(self, other: Iterable[object], /) -> TrackedList:  # type: ignore[misc]
        self._tm_change(list.extend, other)
        return self

    def __imul__(self, n: SupportsIndex, /) -> TrackedList:
        self._tm_change(list.__imul__, n)
        return self

    def append(self, value):
        return self._tm_change(list.append, value)

    def extend(self, values):
        return self._tm_change(list.extend, values)

    def insert(self, index, value):
        return self._tm_change(list.insert, index, value)

    def remove(self, value):
        return self._tm_change(list.remove, value)

    def clear(self):
        return self._tm_change(list.clear)

    def sort(self, *, key=None, reverse=False):
        return self._tm_change(lambda lst: list.sort(lst, key=key, reverse=reverse))

    def reverse(self):
        return self._tm_change(list.reverse)

    def copy(self):
        return _tracked_like(self, TrackedList(), list(list.__iter__(self)))

    __copy__ = copy

    def __deepcopy__(self, memo):
        new = memo[id(self)] = TrackedList()
        list.extend(new, [copy.deepcopy(v, memo) for v in list(list.__iter__(self))])
        return _tracked_like(self, new, ())

    def __reduce_ex__(self, protocol):
        if self._tm_rec is not None:
            self._tm_rec.copied = True
        return (list, (), None, iter(list(list.__iter__(self))))


def _tracked_like(source, new, content):
    if isinstance(new, TrackedDict):
        dict.update(new, content)
    else:
        list.extend(new, content)
    new._tm_rec, new._tm_paths = source._tm_rec, source._tm_paths
    return new


class _TooBig(Exception):
    pass


def wrap(value, rec: _FileRecord, path: str, memo: dict, budget: list[int]):
    """A tracked copy of a freshly loaded tree; leaves go into ``rec.keys``. YAML anchors make
    one object appear at several paths: it stays one object (identity is kept) with all of them."""
    kind = type(value)
    if kind is not dict and kind is not list:
        rec.keys[path] = short_repr(value)
        return value
    node = memo.get(id(value))
    if node is not None:
        _add_path(node, rec, path, set())
        return node
    budget[0] -= 1 + len(value)
    if budget[0] < 0:
        raise _TooBig
    if kind is dict:
        node = memo[id(value)] = TrackedDict()
        node._tm_rec, node._tm_paths = rec, (path,)
        if not value:
            rec.keys[path] = "{}"
        for key, item in value.items():
            dict.__setitem__(node, key, wrap(item, rec, _join(path, key), memo, budget))
        return node
    node = memo[id(value)] = TrackedList()
    node._tm_rec, node._tm_paths = rec, (path,)
    if all(type(item) is not dict and type(item) is not list for item in value):
        rec.keys[path] = short_repr(value)  # a list of numbers/strings is one setting
        list.extend(node, value)
    else:
        list.extend(node, [wrap(item, rec, _join(path, i), memo, budget) for i, item in enumerate(value)])
    return node


def _add_path(node, rec: _FileRecord, path: str, seen: set[int]) -> None:
    if id(node) in seen or len(node._tm_paths) >= 8:  # 8: recursive anchors must end somewhere
        return
    seen.add(id(node))
    node._tm_paths += (path,)
    if isinstance(node, TrackedDict):
        items = list(dict.items(node))
        if not items:
            rec.keys[path] = "{}"
    else:
        items = list(enumerate(list.__iter__(node)))
        if all(not isinstance(item, (TrackedDict, TrackedList)) for _, item in items):
            rec.keys[path] = short_repr(node)
            return
    for key, item in items:
        if isinstance(item, (TrackedDict, TrackedList)):
            _add_path(item, rec, _join(path, key), seen)
        else:
            rec.keys[_join(path, key)] = short_repr(item)
