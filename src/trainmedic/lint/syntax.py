"""Small questions about ast nodes that every rule asks: a call's argument, a target's names,
whether an ``if`` test limits a statement to some steps."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from typing import TypeVar

N = TypeVar("N", bound=ast.AST)

#: Words that, in an ``if`` test, mean "only some steps": log every N, verbose, the last batch.
_RATE_WORDS = re.compile(
    r"interval|every|freq|period|verbose|debug|should_log|log_now|log_step|print_step|display|last|final",
    re.IGNORECASE,
)
#: Which process or device this is: ``rank == 0`` holds on every step of that process.
_IDENTITY_WORDS = re.compile(r"rank|process_index|is_main|master|world|node|device|gpu", re.IGNORECASE)


#: A name that holds a device, as training code names one: ``device``, ``dev``, ``cuda_device``.
_DEVICE_NAME = re.compile(r"device|^dev$|cuda|gpu", re.IGNORECASE)


def names_a_gpu(device: ast.AST) -> bool:
    """``device``, ``self.device``, ``"cuda:0"``, ``torch.device("cuda")``, ``"cuda" if c else
    "cpu"``; not ``"cpu"``, not a dtype."""
    if isinstance(device, ast.Call) and last_name(device.func) == "device":
        if not device.args:
            return False
        device = device.args[0]
    text = string_value(device)
    if text is not None:
        return bool(re.match(r"(cuda|gpu)", text, re.IGNORECASE))
    if isinstance(device, ast.IfExp):
        return names_a_gpu(device.body) or names_a_gpu(device.orelse)
    return bool(_DEVICE_NAME.search(last_name(device) or ""))


def last_name(expr: ast.AST) -> str | None:
    """``self.optimizer`` → ``optimizer``; ``opt`` → ``opt``; anything else → None."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def names_in(expr: ast.AST) -> set[str]:
    """Every plain name an expression reads."""
    return {node.id for node in ast.walk(expr) if isinstance(node, ast.Name)}


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    """A call's argument given by position or by keyword."""
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return keyword(call, name)


def string_value(expr: ast.AST | None) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    return None


def bound_names(target: ast.AST) -> set[str]:
    """Names a ``for`` target or an assignment target binds (``i``, ``(x, y)``, ``*rest``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(bound_names(e) for e in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    return set()


def names_bound_in(node: ast.AST) -> set[str]:
    """Every name an assignment or a loop target binds anywhere inside ``node``."""
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            names |= {n for t in targets for n in bound_names(t)}
        elif isinstance(child, (ast.For, ast.AsyncFor, ast.comprehension)):
            names |= bound_names(child.target)
    return names


def target_nodes(target: ast.AST) -> Iterator[ast.AST]:
    """An assignment or ``for`` target and every target it unpacks (``a, (b, *c)``), outermost first."""
    yield target
    if isinstance(target, ast.Starred):
        yield from target_nodes(target.value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_nodes(element)


def is_rate_limit(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        # ``if step == 0`` or ``if i == len(loader) - 1``: one step of many. A string on either
        # side (``if mode == "train"``) is a configuration switch, and ``if rank == 0`` says
        # which process: both are true on every step or on none.
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq) for op in node.ops):
            sides = [node.left, *node.comparators]
            if all(string_value(side) is None for side in sides) and not any(
                _IDENTITY_WORDS.search(word) for side in sides for word in words_in(side)
            ):
                return True
        word = last_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if word and _RATE_WORDS.search(word):
            return True
    return False


def words_in(expr: ast.AST, strings: bool = False) -> Iterator[str]:
    """The names and attribute names in ``expr`` (and its string constants with ``strings``)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def source_order(nodes: Iterable[N]) -> list[N]:
    return sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
