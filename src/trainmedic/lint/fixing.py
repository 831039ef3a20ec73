"""Building blocks for the fixers: a node's place as an :class:`Edit` range and its text; the
indentation of lines; whole statements found in their block, moved, guarded, removed, or given a
line before them; a fresh name; a module imported under which name, and the edit that imports it.

A fixer changes as little text as it can, so the user's comments, quotes and layout survive: it
replaces one node's text or inserts whole lines; it never re-generates a module with
:func:`ast.unparse`.
"""

from __future__ import annotations

import ast
import re
from typing import TypeAlias

from trainmedic.lint.context import FUNCTIONS, SCOPES, ModuleContext
from trainmedic.lint.model import Edit

_INDENT = re.compile(r"[ \t]*")
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
#: Compound statements whose header runs once, before their body: a line put before the
#: statement runs right before the header does.
_HEADERS = {ast.If: "test", ast.For: "iter", ast.AsyncFor: "iter"}
#: Statements with an indented block of their own, whose first line shows the module's indentation.
_BLOCKS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If)
#: The nodes ``ast.parse`` gives a place in the source (a line and column, and where they end).
Located: TypeAlias = ast.stmt | ast.expr | ast.arg | ast.keyword | ast.alias | ast.excepthandler | ast.pattern

# -- places and text --------------------------------------------------------------------------


def column(context: ModuleContext, line: int, byte_offset: int) -> int:
    """ast's UTF-8 byte offset on a line → the 1-based character column an :class:`Edit` uses."""
    text = context.lines[line - 1] if 0 < line <= len(context.lines) else ""
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", "replace")) + 1


def end_of(node: Located) -> tuple[int, int]:
    """(end line, end UTF-8 byte offset) of a node, as ast counts them."""
    # The stubs allow None for a node built by hand; ast.parse sets both on every node it places,
    # and fixers only edit parsed code.
    assert node.end_lineno is not None and node.end_col_offset is not None, "a parsed node has an end"
    return node.end_lineno, node.end_col_offset


def end_line(node: Located) -> int:
    """The line a node ends on."""
    return end_of(node)[0]


def line_of(node: ast.AST) -> int:
    """The line a node starts on, for a node typed as any node (one that ``ast.walk`` found) that
    the caller knows has a place: a statement, an expression..."""
    assert isinstance(node, Located), f"a {type(node).__name__} has no place in the source"
    return node.lineno


def span(context: ModuleContext, node: Located) -> tuple[int, int, int, int]:
    """(line, col, end_line, end_col) of a node, 1-based characters, end exclusive."""
    last, end_offset = end_of(node)
    return (
        node.lineno,
        column(context, node.lineno, node.col_offset),
        last,
        column(context, last, end_offset),
    )


def text_of(context: ModuleContext, node: ast.AST) -> str:
    return ast.get_source_segment(context.source, node) or ""


def text_between(context: ModuleContext, start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source between two (line, 1-based character column) places."""
    (line, col), (end_line, end_col) = start, end
    if line == end_line:
        return context.lines[line - 1][col - 1 : end_col - 1]
    middle = context.lines[line : end_line - 1]
    return "\n".join(
        [context.lines[line - 1][col - 1 :], *middle, context.lines[end_line - 1][: end_col - 1]]
    )


def replace_node(context: ModuleContext, node: Located, text: str) -> Edit:
    return Edit(*span(context, node), text)


def insert_at(line: int, col: int, text: str) -> Edit:
    return Edit(line, col, line, col, text)


def trailing_comment(context: ModuleContext, line: int, after_col: int) -> str:
    """The ``# comment`` after character column ``after_col`` (1-based) on a line, or ""."""
    rest = context.lines[line - 1][after_col - 1 :]
    match = re.match(r"[^#]*?(#.*)$", rest)
    return match.group(1).rstrip() if match else ""


# -- indentation ------------------------------------------------------------------------------


def indent_of(context: ModuleContext, line: int) -> str:
    """The whitespace a line starts with."""
    found = _INDENT.match(context.lines[line - 1])
    assert found is not None  # `[ \t]*` matches at the start of every line, if only the empty string
    return found.group(0)


def indent_unit(context: ModuleContext) -> str:
    """One level of the module's indentation: what its first indented block adds (4 spaces when
    nothing is indented yet)."""
    for node in context.nodes(*_BLOCKS):
        # nodes() names more than three kinds by their common base, stmt, which has no body.
        assert isinstance(node, _BLOCKS)
        outer, inner = indent_of(context, node.lineno), indent_of(context, node.body[0].lineno)
        if node.body[0].lineno != node.lineno and inner.startswith(outer) and len(inner) > len(outer):
            return inner[len(outer) :]
    return "    "


def string_lines(node: ast.AST) -> set[int]:
    """Lines that continue a multi-line string literal: changing their indentation would change
    the string."""
    inside: set[int] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.Constant, ast.JoinedStr)) and end_line(child) > child.lineno:
            inside.update(range(child.lineno + 1, end_line(child) + 1))
    return inside


def dedented(context: ModuleContext, first: int, last: int, by: int, keep: set[int]) -> list[str]:
    """Lines ``first``..``last`` with up to ``by`` leading whitespace characters taken off each,
    except blank lines and the lines in ``keep`` (inside a multi-line string)."""
    out = []
    for number in range(first, last + 1):
        line = context.lines[number - 1]
        if number in keep or not line.strip():
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" \t"))
        out.append(line[min(lead, by) :])
    return out


# -- whole statements -------------------------------------------------------------------------


def statement_of(context: ModuleContext, node: ast.AST) -> ast.stmt | None:
    """The statement that holds ``node`` (``node`` itself when it is one)."""
    if isinstance(node, ast.stmt):
        return node
    return next((a for a in context.ancestors(node) if isinstance(a, ast.stmt)), None)


def block_of(context: ModuleContext, stmt: ast.stmt) -> list[ast.stmt]:
    """The list of statements ``stmt`` stands in: its parent's body, ``orelse``, ``finalbody``..."""
    parent = context.parent(stmt)
    assert parent is not None  # a statement of the tree sits in another node, the module at least
    for _, value in ast.iter_fields(parent):
        if isinstance(value, list) and any(item is stmt for item in value):
            return value
    return [stmt]


def owns_its_lines(context: ModuleContext, stmt: ast.stmt) -> bool:
    """True when nothing but whitespace precedes the statement on its first line and nothing but
    whitespace or a comment follows it on its last (no ``a = 1; b = 2``, no ``if x: stmt``)."""
    end, end_offset = end_of(stmt)
    first = context.lines[stmt.lineno - 1][: column(context, stmt.lineno, stmt.col_offset) - 1]
    last = context.lines[end - 1][column(context, end, end_offset) - 1 :]
    return not first.strip() and (not last.strip() or last.strip().startswith("#"))


def guard_statements(context: ModuleContext, stmts: list[ast.stmt], condition: str) -> Edit:
    """Put consecutive statements of one block under ``if condition:``, their lines one level
    deeper. The caller checks :func:`owns_its_lines` first: whole lines move."""
    first, last = stmts[0], stmts[-1]
    indent, unit = indent_of(context, first.lineno), indent_unit(context)
    start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
    lines = context.lines[start - 1 : end_line(last)]
    # A line that continues a multi-line string keeps its text: indenting it would change the string.
    strings = set().union(*(string_lines(stmt) for stmt in stmts))
    body = [
        line if (not line.strip() or number in strings) else unit + line
        for number, line in enumerate(lines, start=start)
    ]
    text = "\n".join([f"{indent}if {condition}:", *body])
    return Edit(start, 1, end_line(last), len(lines[-1]) + 1, text)


def insert_lines(context: ModuleContext, line: int, text: str) -> Edit:
    """Insert whole lines (``text`` ends with its line end) before line ``line``; after the file's
    last line when ``line`` is past it (the file may not end with a line end)."""
    if line <= len(context.lines):
        return insert_at(line, 1, text)
    last = len(context.lines)
    return insert_at(last, len(context.lines[last - 1]) + 1, "\n" + text.rstrip("\n"))


def remove_lines(context: ModuleContext, first: int, last: int) -> Edit:
    """Delete whole lines, their line ending included."""
    if last < len(context.lines):
        return Edit(first, 1, last + 1, 1, "")
    # The file's last line without a line ending: take the ending before it instead.
    if first > 1:
        return Edit(first - 1, len(context.lines[first - 2]) + 1, last, len(context.lines[last - 1]) + 1, "")
    return Edit(first, 1, last, len(context.lines[last - 1]) + 1, "")


def in_own_scope(context: ModuleContext, node: ast.AST, scope: ast.AST) -> bool:
    """``node`` runs in ``scope`` itself, not in a function, lambda or class inside it."""
    for ancestor in context.ancestors(node):
        if ancestor is scope:
            return True
        if isinstance(ancestor, SCOPES):
            return False
    return scope is context.tree


def hoist_point(context: ModuleContext, node: ast.AST) -> ast.stmt | str:
    """The statement before which a new line runs right before ``node`` is evaluated, each time
    it is: the statement holding ``node``, when it starts its own line and ``node`` is neither in
    a lambda, a comprehension or one branch of a conditional expression, nor in a header that
    runs more than once or cannot have a line put before it (``while``, ``elif``, ``with``).
    Otherwise a reason, as a clause ("it is inside a lambda")."""
    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, ast.Lambda):
            return "it is inside a lambda, where no statement can go before it"
        if isinstance(ancestor, _COMPREHENSIONS):
            return "it is inside a comprehension, which evaluates it once per element"
        if isinstance(ancestor, ast.IfExp) and child is not ancestor.test:
            return "it runs only in one branch of a conditional expression (x if c else y)"
        if isinstance(ancestor, ast.BoolOp) and child is not ancestor.values[0]:
            return "it runs only when an `and`/`or` before it lets it"
        if isinstance(ancestor, ast.stmt):
            return _statement_point(context, ancestor, child)
        child = ancestor
    return "it is not inside a statement"


def _statement_point(context: ModuleContext, stmt: ast.stmt, child: ast.AST) -> ast.stmt | str:
    if isinstance(stmt, (*FUNCTIONS, ast.ClassDef)):
        return "it is in a definition's header (a default, a decorator, a base class)"
    compound = hasattr(stmt, "body")
    if compound:
        field = _HEADERS.get(type(stmt))
        if field is None or getattr(stmt, field) is not child:
            kind = type(stmt).__name__.lower()
            return f"it is in the header of a `{kind}` statement, where no line can go before it alone"
    text = context.lines[stmt.lineno - 1]
    if isinstance(stmt, ast.If) and text.lstrip().startswith("elif"):
        return "it is in an `elif` test, where no line can go before it alone"
    if compound:
        # A compound statement's own line: nothing but indentation before it.
        if not text[: column(context, stmt.lineno, stmt.col_offset) - 1].strip():
            return stmt
        return "it shares its line with other code"
    if not owns_its_lines(context, stmt):
        return "it shares its line with other code (`if c: x = ...` or `a; b`)"
    return stmt


# -- names and imports ------------------------------------------------------------------------


def free_name(context: ModuleContext, wanted: str) -> str:
    """``wanted``, or ``wanted_2``, ``wanted_3``... : a name the module does not use yet."""
    used = (
        {node.id for node in context.nodes(ast.Name)}
        | {node.arg for node in context.nodes(ast.arg)}
        | {node.attr for node in context.nodes(ast.Attribute)}
    )
    used |= {node.name for node in context.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)}
    name, number = wanted, 1
    while name in used:
        number += 1
        name = f"{wanted}_{number}"
    return name


def module_alias(context: ModuleContext, module: str, at: Located) -> str | None:
    """The name ``module`` is imported under (``import numpy as np`` → ``np``) where ``at`` runs:
    an import at module level, or earlier in a function that holds ``at``; None when there is none."""
    scopes: list[ast.AST] = [context.tree]
    scopes += [a for a in context.ancestors(at) if isinstance(a, FUNCTIONS)]
    for scope in scopes:
        for node in context.walk_scope(scope):
            if not isinstance(node, ast.Import) or (scope is not context.tree and node.lineno > at.lineno):
                continue
            if any(
                isinstance(a, ast.If) and "TYPE_CHECKING" in ast.unparse(a.test)
                for a in context.ancestors(node)
            ):
                continue  # not imported when the code runs
            for alias in node.names:
                if alias.name == module:
                    return alias.asname or module
    return None


def ensure_import(context: ModuleContext, module: str, wanted: str, at: Located) -> tuple[str, list[Edit]]:
    """(the name to call ``module`` by at ``at``, the edits that import it when it is not yet):
    ``import numpy as np`` goes after the module's leading imports."""
    alias = module_alias(context, module, at)
    if alias is not None:
        return alias, []
    name = wanted if wanted not in _names_bound_in_module(context) else free_name(context, wanted)
    line = f"import {module}" if name == module else f"import {module} as {name}"
    return name, [_top_insertion(context, line)]


def _names_bound_in_module(context: ModuleContext) -> set[str]:
    """Every name the module binds anywhere: assignments, parameters, imports, definitions."""
    names = {n.id for n in context.nodes(ast.Name) if not isinstance(n.ctx, ast.Load)}
    names |= {n.arg for n in context.nodes(ast.arg)}
    names |= {n.name for n in context.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)}
    for node in context.nodes(ast.Import, ast.ImportFrom):
        names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _top_insertion(context: ModuleContext, line: str) -> Edit:
    """After the module's leading imports, as ruff adds one; after its docstring and ``from
    __future__`` imports when it has none."""
    body = list(context.tree.body)
    skip = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            skip = 1
    while (
        skip < len(body)
        and isinstance(future := body[skip], ast.ImportFrom)
        and future.module == "__future__"
    ):
        skip += 1
    last = skip
    while last < len(body) and isinstance(body[last], (ast.Import, ast.ImportFrom)):
        last += 1
    if last > skip or (last == skip and skip > 0 and last == len(body)):
        # After an import (or the docstring and __future__ imports of a module with nothing else).
        return insert_lines(context, end_line(body[last - 1]) + 1, line + "\n")
    if skip < len(body):
        first = body[skip]
        number = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
        return insert_at(number, 1, line + "\n")
    return insert_at(1, 1, line + "\n")
