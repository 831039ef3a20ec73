"""TM105's repair: a file or sqlite3 connection opened for every sample, kept on the Dataset
instead and opened once per process."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import replace
from typing import TypeAlias

from trainmedic.lint.context import FUNCTIONS, Function, ModuleContext
from trainmedic.lint.fixing import (
    block_of,
    column,
    dedented,
    end_line,
    end_of,
    ensure_import,
    free_name,
    hoist_point,
    indent_of,
    indent_unit,
    insert_at,
    insert_lines,
    owns_its_lines,
    remove_lines,
    replace_node,
    span,
    string_lines,
    text_of,
    trailing_comment,
)
from trainmedic.lint.handle_uses import use_problem, uses_problem
from trainmedic.lint.model import Edit, Fix
from trainmedic.lint.opens import ScopeMemo, getitem_reach, opened, per_batch, session_factories
from trainmedic.lint.syntax import last_name, string_value

#: Openers whose handle is kept on the Dataset: the attribute it is kept in, and what it is.
_KEPT = {"h5py.File": ("_file", "the HDF5 file"), "sqlite3.connect": ("_conn", "the sqlite3 connection")}
_HEADER_END = re.compile(r"\s*:\s*(#.*)?$")
#: Where the open is replaced: the edits that put the guard (or nothing) before the statement and
#: the kept handle in place of the open, and that statement; or why it cannot be.
_Site: TypeAlias = tuple[Callable[[str, str], list[Edit]], ast.stmt] | str


def fix(context: ModuleContext, node: ast.AST) -> Fix | str:
    """In a Dataset method, the file or sqlite3 connection opened for every sample becomes one
    kept on the Dataset and opened on first use in each process: ``None`` in ``__init__``,
    reopened when the process id changes (a forked DataLoader worker must not read through its
    parent's handle), and left out when the Dataset is pickled (a spawned worker opens its own;
    an open handle cannot be pickled)."""
    assert isinstance(node, ast.Call)  # TM105's check reports open calls only
    call = node
    memo, factories = ScopeMemo(context), session_factories(context)
    opening = opened(context, call, factories)
    assert opening is not None  # the check reported it because it opens something
    name, path = opening
    qualname = context.qualname(call.func) or ""
    method, cls = context.function_of(call), context.class_of(call)
    if cls is None or method is None or method not in getitem_reach(memo, cls) or method not in cls.body:
        found = per_batch(memo, call)
        when = found[1] if found else "every step"
        return (
            f"it is opened on {when}, not in a Dataset method whose object could keep it; "
            "open it once before the loop and pass the handle in"
        )
    if qualname not in _KEPT:
        return _not_kept(qualname, name, path)
    bases = [last_name(b) or "" for b in cls.bases]
    if qualname == "sqlite3.connect" and any(b.endswith(("Sequence", "PyDataset")) for b in bases):
        return (
            "Keras calls a Sequence's __getitem__ from several threads, and an sqlite3 connection works only "
            "in the thread that opened it; open one per thread by hand (threading.local) or load the rows "
            "once with trainmedic.data"
        )
    args = method.args.posonlyargs + method.args.args
    decorators = {last_name(d) for d in method.decorator_list}
    if not args or decorators & {"staticmethod", "classmethod"} or context.scope_of(call) is not method:
        return "it is not opened directly in a method with `self`, where a handle could be kept"
    me = args[0].arg
    problem = _class_problem(cls) or _path_problem(context, cls, call, method, me)
    if problem:
        return problem
    kind = "h5" if qualname == "h5py.File" else "sqlite"
    parent = context.parent(call)
    if isinstance(parent, ast.withitem):
        site = _with_site(context, kind, call, parent, method)
    elif isinstance(parent, ast.Assign) and parent.value is call:
        site = _assign_site(context, kind, parent, method)
    else:
        site = _inline_site(context, kind, call)
    if isinstance(site, str):
        return site
    replace_site, site_stmt = site
    attr, pid, kept = _names(context, cls, call, _KEPT[qualname][0])
    os_name, edits = ensure_import(context, "os", "os", call)
    if not kept:
        setup = _setup_edits(context, cls, method, attr, pid)
        if isinstance(setup, str):
            return setup
        edits += setup
    unit, indent = indent_unit(context), indent_of(context, site_stmt.lineno)
    guard = (
        f"{indent}if {me}.{attr} is None or {me}.{pid} != {os_name}.getpid():  # first use in this process\n"
        f"{indent}{unit}{me}.{attr} = {_moved(context, call, indent + unit)}\n"
        f"{indent}{unit}{me}.{pid} = {os_name}.getpid()\n"
    )
    if kept and _guarded_before(context, site_stmt, f"{me}.{attr}"):
        guard = ""  # the same handle was made sure of just before, in the same block
    edits += replace_site(guard, f"{me}.{attr}")
    return Fix(
        f"keep {_KEPT[qualname][1]} in {me}.{attr}, opened once per process, instead of opening it every call",
        tuple(edits),
    )


def _moved(context: ModuleContext, call: ast.Call, indent: str) -> str:
    """The call's text for a line indented ``indent``: a call written over several lines keeps
    its continuation lines where they were relative to its first."""
    lines = text_of(context, call).split("\n")
    was = indent_of(context, call.lineno)
    keep = string_lines(call)
    out = lines[:1]
    for number, line in enumerate(lines[1:], start=call.lineno + 1):
        if number in keep or not line.strip():
            out.append(line)
        elif indent.startswith(was):
            out.append(indent[len(was) :] + line)
        else:
            lead = len(line) - len(line.lstrip(" \t"))
            out.append(line[min(lead, len(was) - len(indent)) :])
    return "\n".join(out)


def _guarded_before(context: ModuleContext, stmt: ast.stmt, kept: str) -> bool:
    """An earlier statement of the same block is this fix's ``if self._file is None or ...:``."""
    for before in block_of(context, stmt):
        if before is stmt:
            return False
        if isinstance(before, ast.If) and ast.unparse(before.test).startswith(f"{kept} is None or "):
            return True
    return False


def _not_kept(qualname: str, name: str, path: ast.AST | None) -> str:
    if qualname in ("open", "io.open"):
        return (
            "a file object has a read position, so one kept across samples would need a seek before every "
            "read; read the file once in __init__ and keep its content"
        )
    if qualname in ("numpy.load", "torch.load") or qualname.startswith("pandas.read_"):
        return (
            f"{name}() loads the whole file into a new object every call; load it once in __init__ and keep "
            "it (not done automatically: the code may change the object it gets back)"
        )
    if path is None and qualname != "duckdb.connect":
        return (
            f"{name}() opens a connection to a database server, whose transactions and reconnects a kept "
            "connection must handle; open it once per worker by hand (if self.conn is None: ...) or load "
            "the rows once with trainmedic.data"
        )
    return (
        f"only h5py.File and sqlite3.connect handles are kept automatically; open {name}() once per worker "
        "by hand (if self.handle is None: ...)"
    )


def _class_problem(cls: ast.ClassDef) -> str | None:
    members: dict[str, ast.AST] = {}
    for item in cls.body:
        if isinstance(item, FUNCTIONS):
            members[item.name] = item
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            for target in item.targets if isinstance(item, ast.Assign) else [item.target]:
                if isinstance(target, ast.Name):
                    members[target.id] = item
    if "__slots__" in members:
        return f"{cls.name} has __slots__, which leaves no room for a kept handle"
    for special in ("__reduce__", "__reduce_ex__", "__setstate__"):
        if special in members:
            return f"{cls.name} defines {special}, so how it is pickled for DataLoader workers is its own; keep the handle by hand"
    state = members.get("__getstate__")
    if state is not None and _own_getstate(state) is None:
        return (
            f"{cls.name} defines its own __getstate__; keep the handle by hand and leave it out of the "
            "pickled state (an open handle cannot be pickled)"
        )
    return None


def _own_getstate(method: ast.AST) -> ast.Dict | None:
    """The dict of ``def __getstate__(self): return {**self.__dict__, "_file": None}``, which this
    fix writes and extends."""
    body = getattr(method, "body", [])
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Dict):
        return None
    found = body[0].value
    if (
        not found.keys
        or found.keys[0] is not None
        or ast.unparse(found.values[0]).split(".")[-1] != "__dict__"
    ):
        return None
    return found if all(string_value(k) for k in found.keys[1:]) else None


def _path_problem(
    context: ModuleContext, cls: ast.ClassDef, call: ast.Call, method: Function, me: str
) -> str | None:
    """The path reads ``self.x`` that a method other than ``__init__`` sets: a handle kept from
    the first call would go on reading the old file."""
    read = {
        n.attr
        for n in ast.walk(call)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == me
    }
    for other in (m for m in cls.body if isinstance(m, FUNCTIONS) and m.name != "__init__"):
        parameters = other.args.posonlyargs + other.args.args
        if not parameters:
            continue
        owner = parameters[0]
        for assign in (
            n for n in ast.walk(other) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        ):
            for target in assign.targets if isinstance(assign, ast.Assign) else [assign.target]:
                for element in ast.walk(target):
                    if (
                        isinstance(element, ast.Attribute)
                        and isinstance(element.value, ast.Name)
                        and element.value.id == owner.arg
                        and element.attr in read
                    ):
                        return (
                            f"{me}.{element.attr} is set again in {other.name}(), so a handle opened once "
                            "would keep reading the first file"
                        )
    return None


def _names(context: ModuleContext, cls: ast.ClassDef, call: ast.Call, wanted: str) -> tuple[str, str, bool]:
    """(attribute, pid attribute, already set up): a handle this fix already keeps for the same
    open call in this class is shared; otherwise new names."""
    opened = ast.dump(call)
    for assign in (n for n in ast.walk(cls) if isinstance(n, ast.Assign) and len(n.targets) == 1):
        target, guard = assign.targets[0], context.parent(assign)
        if (
            isinstance(target, ast.Attribute)
            and ast.dump(assign.value) == opened
            and isinstance(guard, ast.If)
            and f"{ast.unparse(target)} is None or" in ast.unparse(guard.test)
        ):
            test = guard.test
            pid = test.values[-1] if isinstance(test, ast.BoolOp) and len(test.values) == 2 else None
            if isinstance(pid, ast.Compare) and isinstance(pid.left, ast.Attribute):
                return target.attr, pid.left.attr, True
    attr = free_name(context, wanted)
    return attr, free_name(context, f"{attr}_pid"), False


def _setup_edits(
    context: ModuleContext, cls: ast.ClassDef, method: Function, attr: str, pid: str
) -> list[Edit] | str:
    """``self._file = None`` (and its pid) at the top of ``__init__`` (class attributes when there
    is no ``__init__``), and ``__getstate__`` leaving the handle out of what is pickled."""
    unit = indent_unit(context)
    init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
    state = next((m for m in cls.body if isinstance(m, FUNCTIONS) and m.name == "__getstate__"), None)
    note = f"  # opened in {method.name}() on first use in each process"
    edits: list[Edit] = []
    if init is not None:
        if not init.args.args:
            return "its __init__ takes no `self` to set the handle on"
        if init.body[0].lineno == init.lineno:
            return "its __init__ is written on one line, where no line can be added"
        me, after = init.args.args[0].arg, _after_preamble(init.body)
        indent = indent_of(context, init.body[0].lineno)
        edits.append(
            _insert_line(
                context, init, after, f"{indent}{me}.{attr} = None{note}\n{indent}{me}.{pid} = None\n"
            )
        )
        where = init
    else:
        first = cls.body[0]
        if first.lineno == cls.lineno:
            return f"class {cls.name} is written on one line, where no line can be added"
        indent = indent_of(context, first.lineno)
        edits.append(
            _insert_line(
                context,
                cls,
                _after_preamble(cls.body),
                f"{indent}{attr} = None{note}\n{indent}{pid} = None\n",
            )
        )
        where = None
    if state is not None:
        found = _own_getstate(state)
        assert found is not None  # _class_problem() turned down a __getstate__ of any other shape
        _, _, line, col = span(context, found)
        edits.append(insert_at(line, col - 1, f', "{attr}": None'))
        return edits
    indent = indent_of(context, cls.body[0].lineno)
    method_text = (
        f"{indent}def __getstate__(self):\n"
        f"{indent}{unit}# Open files and connections cannot be pickled: each DataLoader worker opens its own.\n"
        f'{indent}{unit}return {{**self.__dict__, "{attr}": None}}\n'
    )
    if where is None:
        # With the class attributes: the same insertion, so one edit.
        first_edit = edits.pop()
        edits.append(replace(first_edit, text=first_edit.text + "\n" + method_text + "\n"))
    else:
        edits.append(_insert_line(context, cls, end_line(where) + 1, "\n" + method_text, after_stmt=where))
    return edits


def _after_preamble(body: list[ast.stmt]) -> int:
    """The index in ``body`` after its docstring and a ``super().__init__(...)`` call."""
    position = 0
    if position < len(body) and isinstance(body[0], ast.Expr) and string_value(body[0].value) is not None:
        position = 1
    if (
        position < len(body)
        and isinstance(statement := body[position], ast.Expr)
        and isinstance(statement.value, ast.Call)
    ):
        if ast.unparse(statement.value.func).endswith("__init__"):
            position += 1
    return position


def _insert_line(
    context: ModuleContext,
    owner: ast.FunctionDef | ast.ClassDef,
    at: int,
    text: str,
    after_stmt: ast.stmt | None = None,
) -> Edit:
    """Insert whole lines before ``owner.body[at]`` (after its last statement when ``at`` is the
    body's length); with ``after_stmt``, ``at`` is a line number: insert there."""
    if after_stmt is None:
        body = owner.body
        if at < len(body):
            return insert_at(body[at].lineno, 1, text)
        line = end_line(body[-1]) + 1
    else:
        # Past comments that close the statement's block: they belong to it.
        line, deeper = at, len(indent_of(context, after_stmt.lineno))
        while line <= len(context.lines) and context.lines[line - 1].strip().startswith("#"):
            if len(indent_of(context, line)) <= deeper:
                break
            line += 1
    return insert_lines(context, line, text)


def _with_site(
    context: ModuleContext, kind: str, call: ast.Call, item: ast.withitem, method: Function
) -> _Site:
    """``with h5py.File(...) as f: <body>`` → the guard, ``f = self._file``, the body one level out."""
    stmt = context.parent(item)
    target = item.optional_vars
    if not isinstance(stmt, ast.With) or len(stmt.items) != 1 or not isinstance(target, ast.Name):
        return "it is opened in a `with` of several items or without `as name`, which is not rewritten automatically"
    # The header may span lines (a long call); it ends with ``as f:`` on its last one.
    header_end, target_end = end_of(target)
    before = context.lines[stmt.lineno - 1][: column(context, stmt.lineno, stmt.col_offset) - 1]
    rest = context.lines[header_end - 1][column(context, header_end, target_end) - 1 :]
    header = _HEADER_END.match(rest)
    if before.strip() or not header or stmt.body[0].lineno <= header_end:
        return "its `with` statement is not laid out on lines of its own above its body"
    problem = uses_problem(context, kind, target.id, stmt.body, method)
    if problem:
        return problem
    comment = header.group(1)
    by = len(indent_of(context, stmt.body[0].lineno)) - len(indent_of(context, stmt.lineno))
    last = end_line(stmt)
    body = dedented(context, header_end + 1, last, by, string_lines(stmt))

    def replace_site(guard: str, kept: str) -> list[Edit]:
        handle = f"{indent_of(context, stmt.lineno)}{target.id} = {kept}" + (
            f"  {comment}" if comment else ""
        )
        end = len(context.lines[last - 1]) + 1
        return [Edit(stmt.lineno, 1, last, end, guard + "\n".join([handle, *body]))]

    return replace_site, stmt


def _assign_site(context: ModuleContext, kind: str, assign: ast.Assign, method: Function) -> _Site:
    """``f = h5py.File(...)`` ... ``f.close()`` → the guard, ``f = self._file``; the closes go."""
    target = assign.targets[0]
    if len(assign.targets) != 1 or not isinstance(target, ast.Name) or not owns_its_lines(context, assign):
        return "it is assigned in a way (several targets, shared line) that is not rewritten automatically"
    name = target.id
    closes = [
        stmt
        for stmt in context.walk_scope(method)
        if isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and ast.unparse(stmt.value) == f"{name}.close()"
    ]
    for close in closes:
        if not owns_its_lines(context, close) or len(block_of(context, close)) == 1:
            return (
                f"{name}.close() is alone in its block (a `finally:`), which would be left empty; "
                f"use `with ... as {name}:` and run the fix again"
            )
    rebound = [
        n
        for n in ast.walk(method)
        if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) and n is not target
    ]
    if rebound:
        return f"{name} is assigned again at line {rebound[0].lineno}, so which handle each use reads is not clear"
    skip = {id(n) for close in closes for n in ast.walk(close)} | {id(target)}
    problem = uses_problem(context, kind, name, method.body, method, skip)
    if problem:
        return problem
    last, last_offset = end_of(assign)
    comment = trailing_comment(context, last, column(context, last, last_offset))

    def replace_site(guard: str, kept: str) -> list[Edit]:
        handle = f"{indent_of(context, assign.lineno)}{name} = {kept}" + (f"  {comment}" if comment else "")
        end = len(context.lines[last - 1]) + 1
        edits = [Edit(assign.lineno, 1, last, end, guard + handle)]
        return edits + [remove_lines(context, close.lineno, end_line(close)) for close in closes]

    return replace_site, assign


def _inline_site(context: ModuleContext, kind: str, call: ast.Call) -> _Site:
    """``h5py.File(...)["x"][i]`` → the guard before the statement, ``self._file["x"][i]``."""
    problem = use_problem(context, kind, call)
    if problem:
        return problem
    where = hoist_point(context, call)
    if isinstance(where, str):
        return f"no line can go before the open: {where}"

    def replace_site(guard: str, kept: str) -> list[Edit]:
        return [insert_at(where.lineno, 1, guard), replace_node(context, call, kept)]

    return replace_site, where
