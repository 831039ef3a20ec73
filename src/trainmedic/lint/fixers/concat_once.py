"""TM106's repair: a concatenation of a list that grows every step, done once after the loop."""

from __future__ import annotations

import ast

from trainmedic.lint.accumulators import (
    accumulated_tensor,
    concatenated_list,
    grown_elsewhere,
    grown_in_loop,
    grows_and_resets,
    list_key,
    names_put_in,
    read_keys,
    rebinding,
    reused_buffer,
    touches,
    writes_in_place,
)
from trainmedic.lint.context import FUNCTIONS, LOOPS, SCOPES, Loop, ModuleContext
from trainmedic.lint.fixing import (
    dedented,
    end_line,
    free_name,
    indent_of,
    insert_at,
    insert_lines,
    line_of,
    owns_its_lines,
    remove_lines,
    replace_node,
    span,
    statement_of,
    string_lines,
    text_between,
    text_of,
)
from trainmedic.lint.model import Fix
from trainmedic.lint.syntax import argument, keyword, names_in

#: Concatenations along one axis: doing them step by step or once over all the parts gives the
#: same array (values, dtype, shape). Not stack: it adds a dimension on every call.
_ASSOCIATIVE = frozenset(
    f"{module}.{name}"
    for module, names in (
        ("torch", ("cat", "concat", "concatenate", "vstack", "hstack", "row_stack")),
        ("numpy", ("concatenate", "vstack", "hstack", "row_stack")),
    )
    for name in names
)


def fix(context: ModuleContext, call: ast.AST) -> Fix | str:
    """Where the data flow is provable: ``v = torch.cat(xs)`` whose ``v`` nothing in the loop
    reads moves after the loop; ``acc = torch.cat([acc, x])`` collects ``x`` in a list and
    concatenates once after the loop, ``acc = torch.cat([acc, *parts])``, so the initial tensor's
    dtype and shape count exactly as they did."""
    assert isinstance(call, ast.Call)  # TM106's check reports calls only
    listed = concatenated_list(context, call)
    accumulated = None if listed is not None else accumulated_tensor(context, call)
    key = list_key(listed if listed is not None else accumulated)
    if key is None:
        return "the concatenated list could not be identified"
    if next(context.enclosing_loops(call), None) is None or grown_in_loop(context, call, key) is None:
        return _grown_elsewhere_reason(context, call, key)
    if accumulated is not None:
        return _collect_parts(context, call, key)
    return _move_after_loop(context, call, key)


def _grown_elsewhere_reason(context: ModuleContext, call: ast.Call, key: str) -> str:
    function = context.function_of(call)
    where = f"{function.name}()" if function is not None else "this code"
    growth = grown_elsewhere(context, call, key)
    if growth is not None and growth is context.parent(call):
        return (
            f"`{key}` grows by one concatenation each time {where} runs (every step); where the whole "
            "of it is needed is not visible here: collect the parts in a list and concatenate there"
        )
    line = f" at line {line_of(growth)}" if growth is not None else ""
    return (
        f"`{key}` is appended to{line} and concatenated in {where}, which runs every step; the place "
        "where the list is complete, to concatenate it once (a finalize() step), is not visible in the "
        "code, so fix it by hand"
    )


def _move_after_loop(context: ModuleContext, call: ast.Call, key: str) -> Fix | str:
    """``v = torch.cat(xs)`` in the loop, with ``v`` unread there: the same statement after it."""
    loop = next(context.enclosing_loops(call))
    statement = statement_of(context, call)
    assert statement is not None  # the call is inside the loop, itself a statement
    if statement not in loop.body:
        block = next(a for a in context.ancestors(statement) if isinstance(a, ast.stmt))
        return (
            f"the concatenation is inside the {_kind(block)} at line {block.lineno}, not directly in the "
            "loop's body, so moving it after the loop would change when or how it runs; move it by hand"
        )
    targets = statement.targets if isinstance(statement, ast.Assign) else []
    if not isinstance(statement, ast.Assign) or len(targets) != 1 or not isinstance(targets[0], ast.Name):
        return (
            f"the concatenated result at line {statement.lineno} is used in place, not kept in a "
            "variable; keep a running result instead (a running sum on the device, or concatenate "
            "every N steps)"
        )
    name = targets[0].id
    refusal = _loop_refusal(context, loop, statement) or _variable_refusal(context, loop, statement, name)
    if refusal:
        return refusal
    index = loop.body.index(statement)
    before, after = loop.body[:index], [*loop.body[index + 1 :], *_tests(loop)]
    exit_node = _exit(before)
    if exit_node is not None:
        word = "break" if isinstance(exit_node, ast.Break) else "continue"
        return (
            f"the `{word}` at line {exit_node.lineno} can skip the concatenation on the last step, so "
            f"`{name}` after the loop could differ; move it by hand"
        )
    later = [node for stmt in after for node in ast.walk(stmt)]
    touched = touches(context, later, key)
    if touched is not None:
        return (
            f"`{key}` is used again at line {line_of(touched)}, after the concatenation in the same step, "
            "so after the loop it may hold something else; move it by hand"
        )
    for read in sorted(read_keys(statement.value) - {key}):
        changed = rebinding(later, read)
        if changed is not None:
            return (
                f"`{read}` changes at line {line_of(changed)}, after the concatenation in the same step, so "
                "the statement would see another value after the loop; move it by hand"
            )
    appended = {
        root
        for growth in grows_and_resets(context, ast.Module(body=_body(loop), type_ignores=[]), key)[0]
        for root in names_put_in(growth)
    }
    written = writes_in_place(context, later, appended)
    if written is not None:
        return (
            f"line {line_of(written)} changes in place what was appended to `{key}`, after the "
            "concatenation in the same step; move it by hand"
        )
    if not owns_its_lines(context, statement):
        return f"line {statement.lineno} holds another statement too; move the concatenation by hand"
    if len(loop.body) == 1:
        return "the concatenation is the loop's only statement; move it by hand"
    indent, inner = indent_of(context, loop.lineno), indent_of(context, statement.lineno)
    by = len(inner) - len(indent)
    text = "\n".join(dedented(context, statement.lineno, end_line(statement), by, string_lines(statement)))
    edits = (
        remove_lines(context, statement.lineno, end_line(statement)),
        insert_lines(context, end_line(loop) + 1, text + "\n"),
    )
    return Fix(
        f"move `{name} = ...` after the loop: nothing in the loop reads `{name}`, so one concatenation "
        "after the last step gives the same value",
        edits,
    )


def _collect_parts(context: ModuleContext, call: ast.Call, key: str) -> Fix | str:
    """``acc = torch.cat([acc, x])`` every step: ``parts.append(x)`` and, after the loop,
    ``acc = torch.cat([acc, *parts])``."""
    loop = next(context.enclosing_loops(call))
    statement = context.parent(call)
    assert isinstance(statement, ast.Assign)  # accumulated_tensor() found the call as its value
    func = ast.unparse(call.func)
    if not isinstance(statement.targets[0], ast.Name):
        return (
            f"`{key}` is not a local variable: code outside the loop may read it while the loop runs; "
            "collect the parts by hand"
        )
    if context.qualname(call.func) not in _ASSOCIATIVE:
        return (
            f"{func}() adds a dimension on every step, so the steps do not add up to one call; "
            "collect the parts by hand"
        )
    tensors = argument(call, 0, "tensors")
    assert isinstance(tensors, (ast.List, ast.Tuple))  # what accumulated_tensor() found the tensor in
    elements = tensors.elts
    if list_key(elements[0]) != key:
        return (
            f"the new parts go before `{key}` in the list, not after it; collect them by hand "
            f"(torch.cat([*reversed(parts), {key}]))"
        )
    if len(elements) < 2 or any(list_key(e) == key for e in elements[1:]):
        return f"`{key}` is concatenated with itself, not only with new parts; rewrite it by hand"
    if keyword(call, "out") is not None:
        return f"{func}() writes into out=; collect the parts by hand"
    refusal = _loop_refusal(context, loop, statement)
    if refusal:
        return refusal
    inside = [node for stmt in [*_targets(loop), *_body(loop)] for node in ast.walk(stmt)]
    for node in inside:
        if node is elements[0] or node is statement.targets[0]:
            continue
        if isinstance(node, ast.Name) and node.id == key:
            how = "read" if isinstance(node.ctx, ast.Load) else "assigned"
            return (
                f"`{key}` is {how} inside the loop at line {node.lineno}, so it must stay up to date "
                "every step; keep it as it is or keep a running result instead"
            )
    elsewhere = _used_elsewhere(context, loop, key)
    if elsewhere is not None:
        return elsewhere
    rest = [a for a in call.args if a is not tensors] + [
        k.value for k in call.keywords if k.value is not tensors
    ]
    stored = {node.id for node in inside if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    for name in sorted(names_in(call.func).union(*(names_in(a) for a in rest)) & stored):
        return (
            f"`{name}` changes inside the loop, and one concatenation after it would use only its last "
            "value; collect the parts by hand"
        )
    parts = elements[1:]
    others = [node for node in inside if not _within(context, node, statement)]
    roots = {root for part in parts for root in names_put_in(part)}
    written = writes_in_place(context, others, roots)
    if written is not None:
        return (
            f"line {line_of(written)} changes in place a tensor that is concatenated; a list would keep the "
            "changed one, so collect the parts by hand"
        )
    for part in parts:
        shared = reused_buffer(context, part, inside, others)
        if shared is not None:
            return (
                f"`{text_of(context, part)}` is the same buffer on every step and line {line_of(shared)} may "
                "fill it in place; a list would keep only its last content, so collect the parts by hand"
            )
    name = free_name(context, f"{key}_parts")
    texts = [text_of(context, part) for part in parts]
    single = len(parts) == 1 and not isinstance(parts[0], ast.Starred)
    grow = f"{name}.append({texts[0]})" if single else f"{name}.extend([{', '.join(texts)}])"
    indent, inner = indent_of(context, loop.lineno), indent_of(context, statement.lineno)
    line, col, end, end_col = span(context, tensors)
    first, first_col, last, last_col = span(context, statement)
    final = (
        text_between(context, (first, first_col), (line, col))
        + f"[{key}, *{name}]"
        + text_between(context, (end, end_col), (last, last_col))
    )
    lines = final.split("\n")
    lines = [indent + lines[0]] + [
        indent + line[len(inner) :] if line.startswith(inner) else line for line in lines[1:]
    ]
    edits = (
        insert_at(loop.lineno, 1, f"{indent}{name} = []\n"),
        replace_node(context, statement, grow),
        insert_lines(context, end_line(loop) + 1, "\n".join(lines) + "\n"),
    )
    shown = lines[0].strip() if len(lines) == 1 else f"{key} = {func}([{key}, *{name}], ...)"
    return Fix(
        f"collect the parts in `{name}` and concatenate once after the loop, `{shown}`, with "
        f"`{key}`'s value from before the loop first, as every step had it",
        edits,
    )


def _loop_refusal(context: ModuleContext, loop: Loop, statement: ast.stmt) -> str | None:
    """What makes "after the loop" a different place from "after the last step"."""
    if loop.orelse:
        return f"the loop has an else: block (line {loop.orelse[0].lineno}); move the concatenation by hand"
    for ancestor in context.ancestors(loop):
        if isinstance(ancestor, SCOPES):
            break
        if isinstance(ancestor, ast.Try) and any(_within(context, loop, s) for s in ancestor.body):
            return (
                f"the loop is inside the try block at line {ancestor.lineno}: if an exception stops it, the "
                "result would miss the steps done so far; move the concatenation by hand"
            )
    return None


def _variable_refusal(context: ModuleContext, loop: Loop, statement: ast.Assign, name: str) -> str | None:
    for node in (n for stmt in [*_targets(loop), *_body(loop), *_tests(loop)] for n in ast.walk(stmt)):
        if isinstance(node, ast.Name) and node.id == name and node is not statement.targets[0]:
            if isinstance(node.ctx, ast.Load):
                return (
                    f"the concatenated tensor `{name}` is read inside the loop at line {node.lineno}; keep a "
                    "running result instead (a running sum on the device, or concatenate every N steps)"
                )
            return (
                f"`{name}` is also assigned at line {node.lineno} in the loop, so moving this assignment "
                "out would change its final value; move it by hand"
            )
    return _used_elsewhere(context, loop, name)


def _used_elsewhere(context: ModuleContext, loop: ast.AST, name: str) -> str | None:
    """A function outside the loop that reads ``name`` (and may run during it), or a
    global/nonlocal declaration that shares it."""
    scope = context.scope_of(loop)
    for node in ast.walk(scope):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return (
                f"`{name}` is declared {type(node).__name__.lower()} at line {node.lineno}, so other code "
                "may read it while the loop runs; move the concatenation by hand"
            )
    for function in context.nodes(*FUNCTIONS, ast.Lambda):
        if function is scope or _within(context, function, loop):
            continue
        if scope is not context.tree and not _within(context, function, scope):
            continue
        local = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        nodes = context.walk_scope(function)
        local |= {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if name in local:
            continue
        read = next((n for n in nodes if isinstance(n, ast.Name) and n.id == name), None)
        if read is not None:
            what = "a lambda" if isinstance(function, ast.Lambda) else f"{function.name}()"
            return (
                f"`{name}` is also read by {what} at line {read.lineno}, which may run while the loop does; "
                "move the concatenation by hand"
            )
    return None


def _kind(statement: ast.stmt) -> str:
    words = {ast.If: "if", ast.With: "with", ast.AsyncWith: "with", ast.Try: "try", ast.For: "for"}
    return f"`{words.get(type(statement), type(statement).__name__.lower())}` block"


def _body(loop: Loop) -> list[ast.stmt]:
    return list(loop.body)


def _targets(loop: ast.AST) -> list[ast.AST]:
    return [loop.target] if isinstance(loop, (ast.For, ast.AsyncFor)) else []


def _tests(loop: ast.AST) -> list[ast.AST]:
    """A ``while`` test runs after every step too."""
    return [loop.test] if isinstance(loop, ast.While) else []


def _within(context: ModuleContext, node: ast.AST, container: ast.AST) -> bool:
    return node is container or any(a is container for a in context.ancestors(node))


def _exit(statements: list[ast.stmt]) -> ast.Break | ast.Continue | None:
    """A ``break`` or ``continue`` of this loop among ``statements`` (not of a loop inside)."""
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return node
        if isinstance(node, SCOPES):
            continue
        if isinstance(node, LOOPS):
            stack.extend(node.orelse)  # a break in a nested loop's else: leaves this loop
            continue
        stack.extend(ast.iter_child_nodes(node))
    return None
