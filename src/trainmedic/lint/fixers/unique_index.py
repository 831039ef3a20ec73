"""TM104's repair: a read at a shuffled index becomes a read at the sorted, unique indices
(``np.unique(idx, return_inverse=True)``), with the rows put back in the index's order."""

from __future__ import annotations

import ast
import weakref

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import (
    block_of,
    ensure_import,
    free_name,
    hoist_point,
    indent_of,
    insert_at,
    replace_node,
    span,
    text_of,
)
from trainmedic.lint.h5py_reads import index_of, is_variable, shuffled_reads
from trainmedic.lint.model import Edit, Fix
from trainmedic.lint.syntax import last_name, names_in, target_nodes

#: The reads TM104 reports in a module, found once for all of its fixes.
_FLAGGED: weakref.WeakKeyDictionary[ModuleContext, list[ast.Subscript]] = weakref.WeakKeyDictionary()


def _flagged(context: ModuleContext) -> list[ast.Subscript]:
    found = _FLAGGED.get(context)
    if found is None:
        found = _FLAGGED[context] = [read for read, _, _ in shuffled_reads(context)]
    return found


_NOTE = "h5py reads increasing, unique indices only: read those, then put the rows in order"


def fix(context: ModuleContext, node: ast.AST) -> Fix | str:
    """``x = dset[idx]`` → ``idx_unique, idx_inverse = np.unique(idx, return_inverse=True)`` on
    the line before, then ``x = dset[idx_unique][idx_inverse]``: h5py reads the sorted, unique
    rows and numpy puts them back in ``idx``'s order, duplicates included."""
    assert isinstance(node, ast.Subscript)  # TM104's check reports subscript reads only
    sub = node
    index = index_of(sub)
    shown = text_of(context, index)
    by_hand = (
        f"sort it by hand: `u, inv = np.unique({shown}, return_inverse=True)` before the read, "
        f"then `{text_of(context, sub.value)}[u][inv]`"
    )
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)) for n in ast.walk(index)):
        return (
            f"its index {shown} yields, awaits or assigns a name, so it cannot be computed ahead; {by_hand}"
        )
    where = hoist_point(context, node)
    if isinstance(where, str):
        return f"the read cannot get a line of its own before it: {where}; {by_hand}"
    variables = _variables(index)
    for walrus in (n for n in ast.walk(where) if isinstance(n, ast.NamedExpr)):
        if ast.unparse(walrus.target) in variables:
            return f"{ast.unparse(walrus.target)} is assigned inside the same statement (:=); {by_hand}"
    start = _earlier(context, where, index, shown, variables)
    if isinstance(start, tuple):
        unique, inverse = start
        edits: list[Edit] = []
    else:
        numpy, edits = ensure_import(context, "numpy", "np", start)
        base = last_name(index) if isinstance(index, (ast.Name, ast.Attribute)) else "idx"
        unique, inverse = free_name(context, f"{base}_unique"), free_name(context, f"{base}_inverse")
        indent = indent_of(context, start.lineno)
        block = block_of(context, start)
        position = next(i for i, stmt in enumerate(block) if stmt is start)
        said = position > 0 and _unique_of(block[position - 1]) is not None
        note = "" if said else f"{indent}# {_NOTE}\n"
        edits.append(
            insert_at(
                start.lineno,
                1,
                f"{note}{indent}{unique}, {inverse} = {numpy}.unique({shown}, return_inverse=True)\n",
            )
        )
    _, _, end_line, end_col = span(context, sub)
    edits += [replace_node(context, index, unique), insert_at(end_line, end_col, f"[{inverse}]")]
    return Fix(
        f"read {text_of(context, sub.value)} at the sorted, unique indices of {shown} "
        f"and put the rows back in its order",
        tuple(edits),
    )


def _variables(index: ast.AST) -> set[str]:
    """What the index reads that a statement could change: names and ``self.attr``."""
    found = names_in(index) - {"self"}
    found |= {ast.unparse(n) for n in ast.walk(index) if isinstance(n, ast.Attribute) and is_variable(n)}
    return found


def _earlier(
    context: ModuleContext, where: ast.stmt, index: ast.AST, shown: str, variables: set[str]
) -> tuple[str, str] | ast.stmt:
    """Where the ``np.unique`` line goes, or the names of one that is already there: an index
    without calls (the same value each time it is read) is sorted once for every flagged read of
    it in the same block, with nothing in between that changes it."""
    if any(isinstance(n, ast.Call) for n in ast.walk(index)):
        return where  # a random draw each time: each read keeps its own
    block = block_of(context, where)
    position = next(i for i, stmt in enumerate(block) if stmt is where)
    flagged = {id(sub) for sub in _flagged(context)}
    start = where
    for before in reversed(block[:position]):
        done = _unique_of(before, shown)
        if done is not None:
            between = block[block.index(before) + 1 : position]
            if not any(_changes(stmt, set(done)) for stmt in between):
                return done
            break
        if _changes(before, variables):
            break
        reads = [
            n
            for n in ast.walk(before)
            if isinstance(n, ast.Subscript)
            and id(n) in flagged
            and ast.unparse(index_of(n)) == ast.unparse(index)
        ]
        if any(hoist_point(context, read) is before for read in reads):
            start = before
    return start


def _unique_of(stmt: ast.stmt, shown: str | None = None) -> tuple[str, str] | None:
    """``a, b = np.unique(<shown>, return_inverse=True)`` → ("a", "b"); any index without ``shown``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    target, call = stmt.targets[0], stmt.value
    if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
        return None
    unique, inverse = target.elts
    if not (
        isinstance(unique, ast.Name)
        and isinstance(inverse, ast.Name)
        and last_name(call.func) == "unique"
        and len(call.args) == 1
        and (shown is None or ast.unparse(call.args[0]) == ast.unparse(ast.parse(shown, mode="eval").body))
        and [(k.arg, getattr(k.value, "value", None)) for k in call.keywords] == [("return_inverse", True)]
    ):
        return None
    return unique.id, inverse.id


def _changes(stmt: ast.stmt, variables: set[str]) -> bool:
    """The statement may give one of ``variables`` another value: assigns it or something in it
    (``idx[0] = ...``), loops over it, or passes it to a call or calls a method of it
    (``np.random.shuffle(idx)``, ``idx.sort()``, ``self.reshuffle()``)."""

    def hit(expr: ast.AST | None) -> bool:
        while isinstance(expr, (ast.Subscript, ast.Attribute, ast.Starred)):
            if ast.unparse(expr) in variables:
                return True
            expr = expr.value
        return expr is not None and ast.unparse(expr) in variables

    for node in ast.walk(stmt):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(
            node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension)
        ):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            if set(node.names) & variables:
                return True
        elif isinstance(node, ast.Call):
            if any(hit(arg) for arg in [*node.args, *(k.value for k in node.keywords)]):
                return True
            if isinstance(node.func, ast.Attribute) and hit(node.func.value):
                return True
            method_of_self = isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "self"
            if method_of_self and any(v.startswith("self.") for v in variables):
                return True
        if any(hit(element) for target in targets for element in target_nodes(target)):
            return True
    return False
