"""Whether code only reads an open h5py file or sqlite3 connection, so that one handle kept
across calls gives the same results as a fresh one each call: no write, no close, no query that
changes the connection, and the handle does not leave the code that uses it."""

from __future__ import annotations

import ast
import re

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import in_own_scope

#: What a read of an h5py file may touch; the file is opened read-only, so the rest would fail.
_H5_READS = frozenset(
    {
        "attrs",
        "keys",
        "values",
        "items",
        "get",
        "filename",
        "mode",
        "name",
        "driver",
        "libver",
        "visit",
        "visititems",
    }
)
_H5_WRITES = frozenset(
    {
        "close",
        "flush",
        "create_dataset",
        "create_dataset_like",
        "create_group",
        "create_virtual_dataset",
        "require_dataset",
        "require_group",
        "resize",
        "write_direct",
        "copy",
        "move",
        "create",
        "modify",
        "clear",
        "pop",
        "popitem",
        "update",
        "setdefault",
    }
)
#: Builtins that read a handle and keep nothing of it.
_READERS = frozenset({"len", "list", "sorted", "tuple", "set", "isinstance"})
_SQL_WRITES = re.compile(
    r"\b(INSERT|UPDATE|DELETE|REPLACE|UPSERT|CREATE|DROP|ALTER|ATTACH|DETACH|PRAGMA|VACUUM|REINDEX|ANALYZE"
    r"|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b",
    re.IGNORECASE,
)


def uses_problem(
    context: ModuleContext,
    kind: str,
    name: str,
    body: list[ast.stmt],
    method: ast.AST,
    skip: set[int] | frozenset[int] = frozenset(),
) -> str | None:
    """Why the handle ``name`` cannot be shared across calls: it is closed, written to, or leaves
    the method (returned, stored, passed to code we cannot see, captured by a closure)."""
    for stmt in body:
        for node in ast.walk(stmt):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Name) and node.id == name:
                if not isinstance(node.ctx, ast.Load):
                    return f"{name} is assigned again at line {node.lineno}, so which handle each use reads is not clear"
                if not in_own_scope(context, node, method):
                    return f"{name} is used in a nested function or lambda, which may outlive the call"
                problem = use_problem(context, kind, node)
                if problem:
                    return problem
            if kind == "sqlite" and isinstance(node, ast.Call):
                problem = _query_problem(context, node)
                if problem:
                    return problem
    return None


def use_problem(context: ModuleContext, kind: str, use: ast.AST) -> str | None:
    """Why one use of the handle (a name, or the open call itself) is not a read that leaves it
    as it was."""
    shown = ast.unparse(use)
    parent = context.parent(use)
    if isinstance(parent, ast.Call) and use in parent.args:
        func = context.qualname(parent.func) or ast.unparse(parent.func)
        if func in _READERS:
            return None
        if (
            kind == "sqlite"
            and func in ("pandas.read_sql", "pandas.read_sql_query")
            and parent.args[0] is not use
        ):
            return None
        return f"the handle is passed to {ast.unparse(parent.func)}(), which may keep or close it"
    if isinstance(parent, ast.Compare) and use in parent.comparators:
        if all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops):
            return None
    if kind == "h5":
        chain, node = [], use
        while isinstance(parent, (ast.Subscript, ast.Attribute)) and parent.value is node:
            chain.append(parent)
            node, parent = parent, context.parent(parent)
        if not chain:
            return f"the handle leaves the block ({ast.unparse(parent) if parent else shown}), so it may be kept or closed"
        first = chain[0]
        if isinstance(first, ast.Attribute) and first.attr not in _H5_READS:
            if first.attr == "close":
                return f"the code closes it ({shown}.close())"
            return f"it is used as {shown}.{first.attr}, which is not known to be a read"
        for link in chain:
            if not isinstance(link.ctx, ast.Load):
                return f"it is written to ({ast.unparse(link)} = ...)"
            if isinstance(link, ast.Attribute) and link.attr in _H5_WRITES:
                return f"it is written to or closed ({ast.unparse(link)}())"
        return None
    if isinstance(parent, ast.Attribute) and parent.value is use:
        if parent.attr in ("row_factory", "text_factory"):
            return None
        if parent.attr in ("execute", "cursor") and isinstance(call := context.parent(parent), ast.Call):
            return None if parent.attr == "cursor" else _query_problem(context, call)
        if parent.attr == "close":
            return f"the code closes it ({shown}.close())"
        return f"it is used as {shown}.{parent.attr}, which is not known to leave the connection as it was"
    return f"the handle leaves the block ({ast.unparse(parent) if parent else shown}), so it may be kept or closed"


def _query_problem(context: ModuleContext, call: ast.Call) -> str | None:
    """A query run on the connection (or a cursor of it) that may write: a kept connection would
    hold its transaction open, where each fresh connection's was committed or dropped."""
    func = call.func
    method = func.attr if isinstance(func, ast.Attribute) else None
    if method in ("executemany", "executescript", "commit", "rollback"):
        return f"it runs {method}(), which writes; a kept connection is for reads only"
    qualname = context.qualname(func) or ""
    if method != "execute" and qualname not in ("pandas.read_sql", "pandas.read_sql_query"):
        return None
    query = call.args[0] if call.args else None
    text = _sql_text(context, query)
    if text is None:
        shown = ast.unparse(query) if query is not None else "no query"
        return f"it runs a query that is not written out here ({shown}), which may write"
    words = text.split()
    if not words or words[0].upper() not in ("SELECT", "WITH", "VALUES") or _SQL_WRITES.search(text):
        return f"it runs a query that writes or changes the connection ({' '.join(words[:3])} ...)"
    return None


def _sql_text(context: ModuleContext, query: ast.AST | None) -> str | None:
    """The literal text of a query: a string, an f-string's literal parts, or a module-level constant."""
    if isinstance(query, ast.Constant) and isinstance(query.value, str):
        return query.value
    if isinstance(query, ast.JoinedStr):
        return " ? ".join(str(part.value) for part in query.values if isinstance(part, ast.Constant))
    if isinstance(query, ast.Name):
        values = [
            stmt.value
            for stmt in context.tree.body
            if isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == query.id for t in stmt.targets)
        ]
        return _sql_text(context, values[0]) if len(values) == 1 else None
    return None
