"""TM101's repair: the loop variables a callable reads late, bound when it is made as
keyword-only defaults (``lambda t: t[:, i]`` → ``lambda t, *, i=i: t[:, i]``)."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator

from trainmedic.lint.context import LOOPS, ModuleContext
from trainmedic.lint.fixing import column, end_line, insert_at
from trainmedic.lint.loop_closures import COMPREHENSIONS, Closure, free_names, late_captures, name_stores
from trainmedic.lint.model import Edit, Fix
from trainmedic.lint.syntax import bound_names, names_in

#: Statements and expressions under which an assignment runs on some iterations only.
_BRANCHES = (ast.If, ast.IfExp, ast.Try, ast.For, ast.AsyncFor, ast.While, ast.BoolOp, ast.Match)


def fix(context: ModuleContext, function: ast.AST) -> Fix | str:
    """Bind the captured loop variables when the callable is made, as keyword-only defaults:
    ``lambda t: t[:, i]`` → ``lambda t, *, i=i: t[:, i]``. Keyword-only, because a caller that
    passes one more positional argument than the callable names would silently replace a
    positional default (Keras's LearningRateScheduler tries ``schedule(epoch, lr)`` first, and
    Keras's Lambda passes ``mask=``/``training=`` to positional parameters of those names)."""
    assert isinstance(function, Closure)  # TM101's check reports lambdas and functions only
    reports = list(late_captures(context, function))
    if not reports:
        return "the callable no longer reads a loop variable late"
    names = [name for name in free_names(function) if any(name in captured for _, captured, _ in reports)]
    what = "the lambda" if isinstance(function, ast.Lambda) else f"{function.name}()"
    declared = _declared(function)
    for name in names:
        if name in declared:
            return (
                f"{what} declares `{name}` {declared[name]}, so it shares the variable instead of reading "
                "a copy and cannot take it as a parameter; fix it by hand"
            )
    if function.args.kwarg is not None:
        return (
            f"{what} takes **{function.args.kwarg.arg}, so a parameter `{names[0]}` would also catch a "
            f"caller's `{names[0]}=` keyword; bind the value by hand"
        )
    notes = []
    for name in names:
        loop = next(loop for loop, captured, _ in reports if name in captured)
        sure, maybe, after = _bindings(context, loop, name, function)
        if not sure and maybe:
            return (
                f"`{name}` is assigned before {what} is made only inside the `{_word(maybe[0])}` at line "
                f"{maybe[0].lineno}, which may not run on every iteration, so a default could keep an "
                "earlier iteration's value; bind it by hand"
            )
        if not sure:
            return (
                f"`{name}` is assigned at line {after[0]}, after {what} is made, so a default would keep "
                f"the previous iteration's value; move {what} below that line"
            )
        if after:
            notes.append(
                f"; `{name}` is assigned again at line {after[0]} after {what} is made, and {what} now "
                f"keeps the value from before line {after[0]}"
            )
    edit = _binding_edit(context, function, names)
    if edit is None:
        return f"the end of {what}'s parameter list could not be located; bind the value by hand"
    shown = ", ".join(f"`{name}`" for name in names)
    plural = "s" if len(names) > 1 else ""
    added = edit.text.strip(" ,")
    return Fix(
        f"bind {shown} when {what} is made, as keyword-only default{plural} `{added}`{''.join(notes)}",
        (edit,),
    )


def _declared(function: ast.AST) -> dict[str, str]:
    """Names ``function`` (or a function inside it) declares nonlocal or global."""
    declared: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.Nonlocal, ast.Global)):
            for name in node.names:
                declared[name] = "nonlocal" if isinstance(node, ast.Nonlocal) else "global"
    return declared


def _bindings(
    context: ModuleContext, loop: ast.AST, name: str, function: Closure
) -> tuple[bool, list[ast.stmt | ast.expr], list[int]]:
    """Whether every iteration binds ``name`` before ``function`` is made (a ``for`` target, an
    earlier assignment on every path, a ``while`` test's variable); the earlier assignments made
    only on some paths (under an ``if``, a ``try``, an inner loop); the lines that bind it again after."""
    if isinstance(loop, COMPREHENSIONS):
        return True, [], []
    assert isinstance(loop, LOOPS)  # late_captures() reports loops and comprehensions only
    sure = (isinstance(loop, (ast.For, ast.AsyncFor)) and name in bound_names(loop.target)) or (
        isinstance(loop, ast.While) and name in names_in(loop.test)
    )
    start = (function.lineno, function.col_offset)
    maybe: list[ast.stmt | ast.expr] = []
    after: list[int] = []
    for node in name_stores(loop.body):
        if node.id != name:
            continue
        if (node.lineno, node.col_offset) >= start:
            after.append(node.lineno)
            continue
        branch = next(
            (a for a in _ancestors_within(context, node, loop) if isinstance(a, _BRANCHES)),
            None,
        )
        if branch is None:
            sure = True
        else:
            maybe.append(branch)
    return sure, maybe, sorted(after)


def _word(branch: ast.AST) -> str:
    words = {ast.IfExp: "if", ast.BoolOp: "and/or", ast.AsyncFor: "for", ast.Match: "match"}
    return words.get(type(branch), type(branch).__name__.lower())


def _ancestors_within(context: ModuleContext, node: ast.AST, loop: ast.AST) -> Iterator[ast.AST]:
    for ancestor in context.ancestors(node):
        if ancestor is loop:
            return
        yield ancestor


def _binding_edit(context: ModuleContext, function: Closure, names: list[str]) -> Edit | None:
    """The insertion of ``*, name=name`` (or ``name=name`` after ``*args`` or a bare ``*``) at the
    end of the parameter list."""
    last = _last_parameter_token(context, function)
    if last is None:
        return None
    (line, col), token = last
    binding = ", ".join(f"{name}={name}" for name in names)
    keyword_only = function.args.vararg is not None or bool(function.args.kwonlyargs)
    binding = binding if keyword_only else f"*, {binding}"
    if token == "lambda":
        text = f" {binding}"
    elif token == "(":
        text = binding
    elif token == ",":  # a trailing comma: keep one
        text = f" {binding},"
    else:
        text = f", {binding}"
    return insert_at(line, col + 1, text)


def _last_parameter_token(context: ModuleContext, function: Closure) -> tuple[tuple[int, int], str] | None:
    """The end (line, 0-based character column) and text of the last token before the ``:`` that
    closes a lambda's parameters or the ``)`` that closes a def's: ``lambda`` or ``(`` when there
    are none. None when the source cannot be tokenized from the statement's start."""
    if isinstance(function, ast.Lambda):
        statement = next(a for a in context.ancestors(function) if isinstance(a, ast.stmt))
        first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])
        last_line = end_line(statement)
    else:
        first, last_line = function.lineno, end_line(function)
    start = (function.lineno, column(context, function.lineno, function.col_offset) - 1)
    text = "\n".join(context.lines[first - 1 : last_line]) + "\n"
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    started = opened = False
    depth = nested = 0
    previous = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            position = (token.start[0] + first - 1, token.start[1])
            if not started:
                started = position == start
                if started and isinstance(function, ast.Lambda):
                    opened = True  # a lambda's parameters start right after the keyword
                    previous = ((token.end[0] + first - 1, token.end[1]), token.string)
                continue
            if token.type in skip:
                continue
            string = token.string if token.type == tokenize.OP else None
            if not opened:  # def name[T](...): the first ( outside the type parameters
                depth += string in ("[", "(", "{")
                depth -= string in ("]", ")", "}")
                if string == "(" and depth == 1:
                    opened, depth = True, 0
                    previous = ((token.end[0] + first - 1, token.end[1]), "(")
                continue
            if string in ("(", "[", "{"):
                depth += 1
            elif string in (")", "]", "}"):
                if depth == 0:  # the def's closing parenthesis
                    return previous
                depth -= 1
            elif depth == 0 and token.type == tokenize.NAME and token.string == "lambda":
                nested += 1
            elif depth == 0 and string == ":" and isinstance(function, ast.Lambda):
                if nested == 0:
                    return previous
                nested -= 1
            previous = ((token.end[0] + first - 1, token.end[1]), token.string)
    except (tokenize.TokenError, SyntaxError):
        return None
    return None
