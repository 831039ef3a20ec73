"""h5py reads indexed in random order: where a name or ``self.attr`` got its value, whether that
value is a shuffled index array (and where it was shuffled), and whether a subscript reads an h5py
group or dataset. What TM104 reports, and the reads its fixer sorts."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TypeAlias

from trainmedic.lint.context import FUNCTIONS, ModuleContext
from trainmedic.lint.syntax import argument, keyword, last_name, target_nodes

#: Calls whose result is an index array in random order.
_RANDOM_ORDER = frozenset({"numpy.random.permutation", "torch.randperm", "random.sample"})
#: Random draws that are an array only when given a size (``np.random.choice(n)`` is one int).
_RANDOM_DRAWS = {"numpy.random.choice": 1, "numpy.random.randint": 2}
_IN_PLACE_SHUFFLES = frozenset({"numpy.random.shuffle", "random.shuffle"})
#: Calls that keep their argument's order: the index stays shuffled through them.
_KEEP_ORDER = frozenset({"list", "numpy.asarray", "numpy.array", "torch.as_tensor", "torch.tensor"})
_KEEP_ORDER_METHODS = frozenset({"tolist", "numpy", "astype", "long", "copy", "flatten", "ravel"})
_RNG_NAME = re.compile(r"rng|random|rand_?state|generator", re.IGNORECASE)
#: A node with a place in the source: a statement or an expression.
_Located: TypeAlias = ast.stmt | ast.expr
#: A write to a name: (where, kind, value), see _Flow.events.
_Event: TypeAlias = tuple[_Located, str, "ast.expr | None"]


def _is_rng(context: ModuleContext, expr: ast.AST) -> bool:
    """``rng``, ``self.rng``, ``np.random``, ``random``, ``np.random.RandomState(0)``: a random
    generator object or module."""
    if isinstance(expr, ast.Call):
        return _is_rng(context, expr.func)
    qualname = context.qualname(expr) or ""
    if qualname in ("random", "numpy.random") or qualname.startswith("numpy.random."):
        return True
    name = last_name(expr)
    return bool(name and _RNG_NAME.search(name))


def _order_source(context: ModuleContext, call: ast.Call) -> str | None:
    """``np.random.permutation(n)`` → "np.random.permutation()"; None when not a shuffled array."""
    qualname = context.qualname(call.func) or ""
    what = ast.unparse(call.func) + "()"
    if qualname in _RANDOM_ORDER:
        return what
    if qualname in _RANDOM_DRAWS:
        sized = argument(call, _RANDOM_DRAWS[qualname], "size") is not None
        return what if sized and not _bool_choices(call) else None
    if qualname == "torch.randint":  # torch.randint([low,] high, size): the size is the tuple
        sized = keyword(call, "size") is not None or any(
            isinstance(a, (ast.Tuple, ast.List)) for a in call.args
        )
        return what if sized else None
    func = call.func
    if isinstance(func, ast.Attribute) and _is_rng(context, func.value):
        # ``np.random.sample(n)`` draws floats; ``random.Random().sample`` draws indices.
        if func.attr == "permutation" or (func.attr == "sample" and not qualname.startswith("numpy.")):
            return what
        if func.attr == "choice" and argument(call, 1, "size") is not None and not _bool_choices(call):
            return what
        if func.attr in ("integers", "randint") and argument(call, 2, "size") is not None:
            return what
    return None


def _bool_choices(call: ast.Call) -> bool:
    """``rng.choice([True, False], size=n)`` draws a boolean mask, which h5py takes in any order."""
    options = call.args[0] if call.args else None
    return isinstance(options, (ast.List, ast.Tuple)) and any(
        isinstance(e, ast.Constant) and isinstance(e.value, bool) for e in options.elts
    )


def _shuffled_in_place(context: ModuleContext, call: ast.Call) -> ast.expr | None:
    """``np.random.shuffle(idx)`` / ``rng.shuffle(idx)`` → the shuffled expression."""
    qualname = context.qualname(call.func) or ""
    func = call.func
    in_place = qualname in _IN_PLACE_SHUFFLES or (
        isinstance(func, ast.Attribute) and func.attr == "shuffle" and _is_rng(context, func.value)
    )
    return call.args[0] if in_place and call.args else None


def _sorted_in_place(call: ast.Call) -> ast.expr | None:
    func = call.func
    return func.value if isinstance(func, ast.Attribute) and func.attr == "sort" and not call.args else None


def _pos(node: _Located) -> tuple[int, int]:
    return (node.lineno, node.col_offset)


def _shuffled_at(shuffle: _Located) -> str:
    """``np.random.shuffle() at line 12``: the call of a "shuffle" event, for the message."""
    # _Flow._scan records every shuffle at its call.
    assert isinstance(shuffle, ast.Call)
    return f"{ast.unparse(shuffle.func)}() at line {shuffle.lineno}"


class _Flow:
    """Where a name or ``self.attr`` got its value, within one function or across a class."""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self._index: dict[ast.AST, dict[str, list[_Event]]] = {}

    def events(self, scope: ast.AST, target: ast.AST) -> list[_Event]:
        """(node, kind, value) for every write to ``target`` in ``scope``: kind is "assign"
        (value is what was assigned, None for a loop target or an unpacking), "shuffle" or "sort"."""
        if scope not in self._index:
            self._index[scope] = self._scan(scope)
        return self._index[scope].get(ast.unparse(target), [])

    def _scan(self, scope: ast.AST) -> dict[str, list[_Event]]:
        found: dict[str, list[_Event]] = {}

        def add(target: ast.AST, node: _Located, kind: str, value: ast.expr | None) -> None:
            if is_variable(target):
                found.setdefault(ast.unparse(target), []).append((node, kind, value))

        for node in self.context.walk_scope(scope):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                value = None if isinstance(node, ast.AugAssign) else node.value
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for element in target_nodes(target):
                        add(element, node, "assign", value if element is target else None)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                for element in target_nodes(node.target):
                    add(element, node.target, "assign", None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for element in target_nodes(node.optional_vars):
                    if isinstance(element, ast.expr):  # always: the parts of a target are expressions
                        add(
                            element,
                            element,
                            "assign",
                            node.context_expr if element is node.optional_vars else None,
                        )
            elif isinstance(node, ast.Call):
                shuffled = _shuffled_in_place(self.context, node)
                if shuffled is not None:
                    add(shuffled, node, "shuffle", None)
                elif (sorted_ := _sorted_in_place(node)) is not None:
                    add(sorted_, node, "sort", None)
        for events in found.values():
            events.sort(key=lambda e: _pos(e[0]))
        return found

    def value_at(
        self, target: ast.AST, at: _Located, kind: str, depth: int = 0
    ) -> tuple[str | None, str | None]:
        """What ``target`` holds when ``at`` runs, as (description, value) where kind is "order"
        (description of the shuffle, or None) or "h5" (the h5py object's kind, or None)."""
        if depth > 6:
            return None, None
        scope = self.context.scope_of(at)
        events = self.events(scope, target)
        before = [e for e in events if _pos(e[0]) < _pos(at)]
        loops = set(self.context.enclosing_loops(at))
        # A shuffle later in a loop that also holds ``at`` runs before ``at`` on the next pass.
        carried = [
            e
            for e in events
            if _pos(e[0]) > _pos(at) and e[1] == "shuffle" and loops & set(self.context.enclosing_loops(e[0]))
        ]
        node: _Located | None
        if before:
            node, what, value = before[-1]
        elif isinstance(target, ast.Attribute) and (cls := self.context.class_of(at)) is not None:
            return self._class_value(cls, target, kind, depth)
        elif (
            isinstance(target, ast.Name)
            and isinstance(scope, (ast.stmt, ast.expr))  # a function, lambda or class: not the module
            and not self._is_parameter(scope, target)
        ):
            node, what, value = self._outer_value(scope, target)
        else:
            node, what, value = None, "assign", None
        if kind == "h5":
            return (
                (None, self.h5_kind(value, node, depth + 1))
                if what == "assign" and value is not None
                else (None, None)
            )
        if what == "shuffle" and node is not None:
            return _shuffled_at(node), None
        if what == "sort":
            return None, None
        # A value always comes with the write that assigned it.
        found = self.order(value, node, depth + 1) if value is not None and node is not None else None
        if found is None and carried:
            return _shuffled_at(carried[0][0]), None
        return found, None

    def _is_parameter(self, scope: ast.AST, target: ast.Name) -> bool:
        args = getattr(scope, "args", None)
        return args is not None and target.id in {a.arg for a in ast.walk(args) if isinstance(a, ast.arg)}

    def _outer_value(self, scope: _Located, target: ast.Name) -> tuple[_Located | None, str, ast.expr | None]:
        """A free name: the enclosing function's last write before this function is defined
        (a closure), or the module's only write to it (a global)."""
        while (outer := self.context.scope_of(scope)) is not self.context.tree and isinstance(
            outer, FUNCTIONS
        ):
            events = [e for e in self.events(outer, target) if _pos(e[0]) < _pos(scope)]
            if events or self._is_parameter(outer, target):
                return events[-1] if events else (None, "assign", None)
            scope = outer
        events = self.events(self.context.tree, target)
        return events[-1] if len(events) == 1 else (None, "assign", None)

    def _class_value(
        self, cls: ast.ClassDef, target: ast.Attribute, kind: str, depth: int
    ) -> tuple[str | None, str | None]:
        events = [
            e for method in cls.body if isinstance(method, FUNCTIONS) for e in self.events(method, target)
        ]
        values = [(node, value) for node, what, value in events if what == "assign" and not _is_none(value)]
        if kind == "h5":
            kinds = {
                self.h5_kind(value, node, depth + 1) if value is not None else None for node, value in values
            }
            return None, (kinds.pop() if len(kinds) == 1 else None)
        if any(what == "sort" for _, what, _ in events):
            return None, None
        orders = [self.order(value, node, depth + 1) if value is not None else None for node, value in values]
        shuffles = [node for node, what, _ in events if what == "shuffle"]
        if shuffles:
            return _shuffled_at(shuffles[0]), None
        return (orders[0], None) if orders and all(orders) else (None, None)

    def order(self, expr: ast.AST, at: _Located, depth: int = 0) -> str | None:
        """How ``expr`` came to be in random order ("np.random.permutation() at line 12"), or None."""
        if isinstance(expr, ast.Call):
            source = _order_source(self.context, expr)
            if source is not None:
                return f"{source} at line {expr.lineno}"
            qualname = self.context.qualname(expr.func) or ""
            if qualname in _KEEP_ORDER and expr.args:
                return self.order(expr.args[0], at, depth)
            if isinstance(expr.func, ast.Attribute) and expr.func.attr in _KEEP_ORDER_METHODS:
                return self.order(expr.func.value, at, depth)
            return None
        if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice):
            return self.order(expr.value, at, depth)
        if isinstance(expr, (ast.Name, ast.Attribute)) and is_variable(expr):
            return self.value_at(expr, at, "order", depth)[0]
        return None

    def h5_kind(self, expr: ast.AST | None, at: _Located | None, depth: int = 0) -> str | None:
        """ "file" for an ``h5py.File``, "node" for a group or dataset in one, else None."""
        if expr is None or at is None or depth > 8:
            return None
        if isinstance(expr, ast.Call):
            if self.context.qualname(expr.func) == "h5py.File":
                return "file"
            if isinstance(expr.func, ast.Attribute) and expr.func.attr == "get" and expr.args:
                return "node" if self.h5_kind(expr.func.value, at, depth + 1) else None
            return None
        if isinstance(expr, ast.Subscript):
            parent = self.h5_kind(expr.value, at, depth + 1)
            key = expr.slice
            if parent == "file" and not isinstance(key, (ast.Slice, ast.Tuple)):
                return "node"
            if (
                parent == "node"
                and isinstance(key, (ast.Constant, ast.JoinedStr))
                and isinstance(getattr(key, "value", ""), str)
            ):
                return "node"
            return None
        if isinstance(expr, (ast.Name, ast.Attribute)) and is_variable(expr):
            return self.value_at(expr, at, "h5", depth)[1]
        return None


def is_variable(expr: ast.AST) -> bool:
    """A plain name or ``self.attr``: what this rule follows."""
    if isinstance(expr, ast.Attribute):
        return isinstance(expr.value, ast.Name) and expr.value.id == "self"
    return isinstance(expr, ast.Name)


def _is_none(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def index_of(sub: ast.Subscript) -> ast.expr:
    """The index along the first axis: ``idx`` in ``dset[idx]`` and in ``dset[idx, :]``."""
    return sub.slice.elts[0] if isinstance(sub.slice, ast.Tuple) and sub.slice.elts else sub.slice


def shuffled_reads(context: ModuleContext) -> Iterator[tuple[ast.Subscript, ast.expr, str]]:
    """(read, its index, how the index came to be shuffled) for every read of an h5py dataset
    whose index along the first axis is in random order and was not sorted since."""
    if "h5py" not in context.imports.values() and not any(
        v.startswith("h5py.") for v in context.imports.values()
    ):
        return
    flow = _Flow(context)
    for sub in context.nodes(ast.Subscript):
        if not isinstance(sub.ctx, ast.Load) or flow.h5_kind(sub.value, sub) != "node":
            continue
        index = index_of(sub)
        if isinstance(index, (ast.Slice, ast.Constant)):
            continue
        source = flow.order(index, sub)
        if source is None:
            continue
        yield sub, index, source
