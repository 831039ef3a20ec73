"""The fixes a confirmation tries in the running process, each undone afterwards.

A counterfactual changes one thing while a switch (:class:`Arm`) says so, and nothing while it
does not: the experiment flips the switch between blocks of steps and times both arms.

* :func:`replay_loader`: a DataLoader's batches come from memory. ``_next_data`` (the part of
  ``__next__`` that fetches, collates and pins) returns batches it already produced, so nothing
  is read, decoded, queried or handed over by a worker, while ``__next__`` itself, and the step
  boundary trainmedic marks there, still runs.
* :func:`replay_function`: the user's batch-making function (a ``get_batch``, a ``next_batch``,
  a method) returns results it already returned.
* :func:`skip_call`: the call a statement makes at one line (``torch.save(...)``, ``print(...)``,
  ``logger.info(...)``) is not made from that line; the same callable from anywhere else is.

A skipped ``torch.save`` writes nothing, so the previous file stays as it was. Every change is a
plain attribute swap, undone by :meth:`Counterfactual.remove`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Results kept for replay: enough that a step sees different batches, few enough to stay small.
REPLAY_DEPTH = 8


class Arm:
    """Which arm the experiment is in: ``fixed`` while the counterfactual applies."""

    def __init__(self) -> None:
        self.fixed = False


@dataclass
class Counterfactual:
    """One fix, installed: what it changes in words, and how to take it out again."""

    #: What the fixed arm does, in the report's words: "batches replayed from memory".
    change: str
    arm: Arm
    _undo: list[Callable[[], None]] = field(default_factory=list)
    #: How often the fixed arm used the change (a replay, a skipped call): zero means the
    #: change never took effect and the arms measured the same code.
    used: int = 0

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()

    def swap(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name`` to ``value`` until :meth:`remove` puts back what was there."""
        namespace = owner if isinstance(owner, dict) else getattr(owner, "__dict__", {})
        had = name in namespace
        before = namespace.get(name)
        if isinstance(owner, dict):
            owner[name] = value
            self._undo.append(lambda: owner.__setitem__(name, before) if had else owner.pop(name, None))
            return
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, before) if had else delattr(owner, name))


def replay_loader(arm: Arm) -> Counterfactual:
    """DataLoader batches from memory (see the module docstring)."""
    from torch.utils.data import dataloader

    counterfactual = Counterfactual("batches replayed from memory", arm)
    # Each iterator class has its own _next_data (in the process, or from the workers' queue).
    for iterator in (dataloader._SingleProcessDataLoaderIter, dataloader._MultiProcessingDataLoaderIter):
        _wrap(counterfactual, iterator, "_next_data", at=None, replay=True)
    return counterfactual


def replay_function(arm: Arm, owner: Any, name: str, describe: str) -> Counterfactual:
    """``owner.name`` (a module's function, or a class's method) replays what it returned."""
    counterfactual = Counterfactual(f"{describe} replayed from memory", arm)
    _wrap(counterfactual, owner, name, at=None, replay=True)
    return counterfactual


def skip_call(arm: Arm, owner: Any, name: str, filename: str, line: int, describe: str) -> Counterfactual:
    """``owner.name`` called from ``filename:line`` does nothing in the fixed arm."""
    counterfactual = Counterfactual(f"{describe} at line {line} skipped", arm)
    _wrap(counterfactual, owner, name, at=_LineCheck(filename, line), replay=False)
    return counterfactual


def replay_at_line(
    arm: Arm, targets: list[tuple[Any, str]], filename: str, line: int, describe: str
) -> Counterfactual:
    """Each ``owner.name`` of ``targets`` (``h5py.Dataset.__getitem__``, ``numpy.load``) called
    from ``filename:line`` replays what it returned there; called from anywhere else, it runs."""
    counterfactual = Counterfactual(f"{describe} replayed from memory", arm)
    check = _LineCheck(filename, line)
    for owner, name in targets:
        # Per receiver: f["x"][idx] and f["y"][idx] on one line read two datasets.
        _wrap(counterfactual, owner, name, at=check, replay=True, per_receiver=isinstance(owner, type))
    return counterfactual


def _receiver(obj: Any) -> Any:
    """Which stream a method's call belongs to: the object it reads, which may be a new wrapper
    every call (``f["x"]`` makes a new h5py Dataset for the same data each time)."""
    try:
        return hash(obj)  # h5py hashes a Dataset by the file's object it wraps
    except TypeError:
        return (type(obj), getattr(obj, "path", None) or getattr(obj, "name", None) or id(obj))


class _LineCheck:
    """Whether a frame is at ``filename:line``, however the file's name was compiled."""

    def __init__(self, filename: str, line: int) -> None:
        self.target = str(Path(filename).resolve())
        self.line = line
        self._same: dict[str, bool] = {}  # a code object's file name as compiled -> is it the file

    def __call__(self, frame: Any) -> bool:
        if frame.f_lineno != self.line:
            return False
        compiled = frame.f_code.co_filename
        if compiled not in self._same:
            self._same[compiled] = str(Path(compiled).resolve()) == self.target
        return self._same[compiled]


def _wrap(
    counterfactual: Counterfactual,
    owner: Any,
    name: str,
    *,
    at: _LineCheck | None,
    replay: bool,
    per_receiver: bool = False,
) -> None:
    """Put the change around ``owner.name``: in the fixed arm, a call (from ``at``'s line only,
    where given) replays a result the as-is arm recorded, or does nothing without ``replay``.

    Results are kept in call order, per receiver with ``per_receiver``; a replay cycles through
    them from the first, so calls that alternate within a step stay aligned."""
    original = owner[name] if isinstance(owner, dict) else getattr(owner, name)
    streams: dict[Any, list[Any]] = {}
    cursors: dict[Any, int] = {}

    def changed(*args: Any, **kwargs: Any) -> Any:
        if at is not None and not at(sys._getframe(1)):
            return original(*args, **kwargs)
        key = _receiver(args[0]) if per_receiver and args else 0
        recorded = streams.setdefault(key, [])
        if counterfactual.arm.fixed and (recorded or not replay):
            counterfactual.used += 1
            if not replay:
                return None
            cursor = cursors.get(key, 0)
            cursors[key] = (cursor + 1) % len(recorded)
            return recorded[cursor]
        cursors.pop(key, None)  # the next replay starts from the first result again
        result = original(*args, **kwargs)
        if replay and len(recorded) < REPLAY_DEPTH:
            recorded.append(result)
        return result

    changed.__wrapped__ = original  # type: ignore[attr-defined]
    counterfactual.swap(owner, name, changed)
    # remove() drops the kept results with the rest of the change.
    counterfactual._undo.append(streams.clear)


# -- finding what to change, from the user's source ---------------------------------------------


@dataclass(frozen=True)
class Site:
    """What a ``file:line`` holds, read from the source: the function around it and the call it makes."""

    #: Innermost enclosing ``def``: its name and, for a method, its class (None at module level).
    function: str | None
    klass: str | None
    #: The line of that ``def`` (decorators excluded), to check the live object is the same one.
    def_line: int | None
    #: A statement that is only a call, starting at the line: its callee as a dotted name.
    call: str | None
    #: Whether the function sits inside another function (its object is not reachable by name).
    nested: bool = False
    #: Whether the function returns a value, and whether it holds a training loop itself (a
    #: loop that calls ``backward`` or ``step``): only a function that returns something and
    #: trains nothing is a batch maker whose results can be replayed.
    returns: bool = False
    trains: bool = False


def site_of(filename: str, line: int) -> Site | None:
    """The :class:`Site` at ``filename:line``, or None when the file cannot be read or parsed."""
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"), filename)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    chain: list[ast.AST] = []

    def descend(node: ast.AST, parents: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            start = getattr(child, "lineno", None)
            end = getattr(child, "end_lineno", None)
            if start is not None and end is not None and start <= line <= end:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    parents = [*parents, child]
                    chain[:] = parents
                descend(child, parents)

    descend(tree, [])
    defs = [n for n in chain if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    function = defs[-1] if defs else None
    klass = None
    nested = len(defs) > 1
    if function is not None:
        index = chain.index(function)
        parent = chain[index - 1] if index else None
        if isinstance(parent, ast.ClassDef):
            klass = parent.name
            nested = nested or index > 1
        elif index:
            nested = True
    call = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and node.lineno == line
            and isinstance(node.value, ast.Call)
            and (dotted := _dotted(node.value.func)) is not None
        ):
            call = dotted
            break
    return Site(
        function=function.name if function is not None else None,
        klass=klass,
        def_line=function.lineno if function is not None else None,
        call=call,
        nested=nested,
        returns=function is not None
        and any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(function)),
        trains=function is not None and _trains(function),
    )


def _trains(function: ast.AST) -> bool:
    for loop in ast.walk(function):
        if isinstance(loop, ast.For | ast.While | ast.AsyncFor):
            for node in ast.walk(loop):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("backward", "step", "fit", "train_on_batch")
                ):
                    return True
    return False


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def module_namespace(filename: str) -> dict[str, Any] | None:
    """The globals of the loaded module whose source is ``filename`` (the script's ``__main__`` too)."""
    target = str(Path(filename).resolve())
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and str(Path(path).resolve()) == target:
            return vars(module)
    return None
