"""Callables made in a loop that read a loop variable when they run, not when they are made:
which loops around a lambda or nested function rebind the names it reads, and how the callable
outlives the iteration (stored, registered, run in the background). What TM101 reports, and the
names its fixer binds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TypeAlias

from trainmedic.lint.context import SCOPES, Loop, ModuleContext
from trainmedic.lint.syntax import bound_names, last_name, names_in

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_CLOSURES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)
#: What can capture a loop variable: a lambda or a nested function.
Closure: TypeAlias = ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef
#: What rebinds a variable on every pass: a loop, or a comprehension (its ``for`` clauses).
RebindingLoop: TypeAlias = Loop | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
#: Callees that keep the callable they are given and call it later. Callees that call it at
#: once (sorted/min/max key=, map, filter, re.sub, reduce, and tf.data's ``dataset.map``, which
#: traces its function when .map() is called) are simply not listed, nor is any unknown callee.
_DEFERRING = frozenset(
    {
        "Lambda",
        "LambdaLayer",
        "LambdaCallback",
        "LambdaLR",
        "MultiplicativeLR",
        "LearningRateScheduler",
        "Thread",
        "Process",
        "Timer",
        "submit",
        "apply_async",
        "add_done_callback",
        "add_callback",
        "add_hook",
        "add_event_handler",
        "call_soon",
        "call_later",
        "connect",
    }
)
_STORE_METHODS = frozenset({"append", "appendleft", "insert", "add", "setdefault", "put", "put_nowait"})
#: Keywords whose value is called later by whatever receives it (not ``callback=``: scipy's
#: minimize calls it during the call).
_DEFER_KEYWORDS = frozenset({"target", "lr_lambda", "collate_fn", "worker_init_fn", "hook"})
_CONCURRENT = frozenset({"Thread", "Process", "Timer", "submit", "apply_async"})
#: Methods that, called on what a deferring call returned, end its life within the iteration.
_FINISHERS = frozenset({"remove", "join", "result", "wait", "cancel", "get"})
#: Wrappers that return a callable which still reads the same free variables.
_TRANSPARENT = frozenset({"functools.partial", "partial", "tensorflow.function", "torch.jit.script"})
#: Calls that use what the iteration built before the next iteration rebinds the variable.
_TRAIN_CALLS = frozenset({"fit", "fit_generator", "evaluate", "predict", "train_model", "run_training"})


def _store_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Names these statements bind, not counting nested scopes or comprehension targets."""
    return {node.id for node in name_stores(nodes)}


def name_stores(nodes: Iterable[ast.AST]) -> list[ast.Name]:
    """The names these statements bind, as nodes, not counting nested scopes or comprehension
    targets."""
    found: list[ast.Name] = []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.append(node)
        if isinstance(node, SCOPES):
            continue
        for child in ast.iter_child_nodes(node):
            if not (isinstance(node, ast.comprehension) and child is node.target):
                stack.append(child)
    return found


def _rebinding_loops(context: ModuleContext, function: ast.AST) -> list[RebindingLoop]:
    """Loops around ``function`` in its own scope whose repeated part holds it, innermost first."""
    loops: list[RebindingLoop] = []
    child = function
    for ancestor in context.ancestors(function):
        if isinstance(ancestor, SCOPES):
            break
        if isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While)):
            if any(part is child for part in ancestor.body):
                loops.append(ancestor)
        elif isinstance(ancestor, COMPREHENSIONS):
            if any(getattr(ancestor, field, None) is child for field in ("elt", "key", "value")):
                loops.append(ancestor)
        child = ancestor
    return loops


def free_names(function: Closure) -> list[str]:
    """Names the body reads that neither it nor a function inside it binds, in source order."""
    body = [function.body] if isinstance(function, ast.Lambda) else function.body
    bound: set[str] = set()
    reads: list[ast.Name] = []
    for node in (n for statement in body for n in ast.walk(statement)):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.append(node)
        elif isinstance(node, ast.Name):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    bound |= {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    ordered = sorted(reads, key=lambda n: (n.lineno, n.col_offset))
    return list(dict.fromkeys(n.id for n in ordered if n.id not in bound))


def _callee(func: ast.AST) -> str:
    text = ast.unparse(func)
    return text if len(text) <= 40 else (last_name(func) or "the call")


def _later_use(context: ModuleContext, expr: ast.AST, loop: RebindingLoop, depth: int = 0) -> str | None:
    """How the callable ``expr`` evaluates to outlives the iteration, or None when it does not
    (called on the spot, handed to a callee that calls it at once or that we do not know)."""
    if depth > 4:
        return None
    parent = context.parent(expr)
    keyword_name = None
    if isinstance(parent, ast.keyword):
        keyword_name, parent = parent.arg, context.parent(parent)
    if isinstance(parent, ast.Call):
        return _passed_to(context, parent, expr, keyword_name, loop, depth)
    if isinstance(parent, (ast.List, ast.Tuple, ast.Set)) or (
        isinstance(parent, ast.Dict) and expr in parent.values
    ):
        return _later_use(context, parent, loop, depth + 1)
    if isinstance(parent, ast.IfExp) and expr is not parent.test:
        return _later_use(context, parent, loop, depth + 1)
    if isinstance(parent, (ast.ListComp, ast.SetComp, ast.DictComp)) and expr is not getattr(
        parent, "key", None
    ):
        if parent is loop:
            return "is collected by the comprehension and called after it"
        return _later_use(context, parent, loop, depth + 1)
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and parent.value is expr:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        for target in targets:
            # fns[i] = ... keeps one per iteration; self.fn = ... keeps only the last, which is right.
            if (
                isinstance(target, ast.Subscript)
                and names_in(target.slice) & _rebound(loop)
                and not _per_iteration(target.value, loop)
            ):
                return f"is stored in {ast.unparse(target)} and called later"
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return _name_used_later(context, names, parent, loop, depth)
    return None


def _passed_to(
    context: ModuleContext,
    call: ast.Call,
    expr: ast.AST,
    keyword_name: str | None,
    loop: RebindingLoop,
    depth: int,
) -> str | None:
    if call.func is expr:
        return None
    name = last_name(call.func) or ""
    if (context.qualname(call.func) or "") in _TRANSPARENT:
        return _later_use(context, call, loop, depth + 1)
    if name in _DEFERRING or name.startswith("register") or keyword_name in _DEFER_KEYWORDS:
        if _finished_in_iteration(context, call, loop):
            return None
        if name in _CONCURRENT or keyword_name == "target":
            return f"is run by {_callee(call.func)}() in the background"
        return f"is passed to {_callee(call.func)}(), which calls it later"
    if (
        name in _STORE_METHODS
        and isinstance(call.func, ast.Attribute)
        and not _per_iteration(call.func.value, loop)
    ):
        return f"is kept by {_callee(call.func)}() and called later"
    return None


def _rebound(loop: RebindingLoop) -> set[str]:
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        return bound_names(loop.target) | _store_names(loop.body)
    if isinstance(loop, ast.While):
        return _store_names(loop.body)
    return set().union(*(bound_names(g.target) for g in loop.generators))


def _per_iteration(container: ast.AST, loop: RebindingLoop) -> bool:
    """A list or dict the loop body creates afresh dies with its iteration."""
    if not isinstance(container, ast.Name) or isinstance(loop, COMPREHENSIONS):
        return False
    # A ``while`` loop has no target of its own to bind the name.
    target_names = bound_names(loop.target) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()
    return container.id in _store_names(loop.body) and container.id not in target_names


def _finished_in_iteration(context: ModuleContext, call: ast.Call, loop: RebindingLoop) -> bool:
    """``h = m.register_forward_hook(f) ... h.remove()`` or ``t = Thread(...) ... t.join()``."""
    binding = context.parent(call)
    if not (isinstance(binding, ast.Assign) and isinstance(binding.targets[0], ast.Name)):
        return False
    handle = binding.targets[0].id
    for node in context.walk_scope(loop):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr in _FINISHERS and last_name(func.value) == handle:
            return True
    return False


def _name_used_later(
    context: ModuleContext, names: set[str], binding: ast.stmt | ast.expr, loop: RebindingLoop, depth: int
) -> str | None:
    """A name bound to the callable inside the loop: does a later use in the loop keep it?"""
    if isinstance(loop, COMPREHENSIONS):
        return None
    after = (binding.end_lineno or binding.lineno, binding.end_col_offset or 0)
    uses = [
        node
        for node in context.walk_scope(loop)
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load)
    ]
    for node in uses:
        if (node.lineno, node.col_offset) >= after and (how := _later_use(context, node, loop, depth + 1)):
            return how
    return None


def _trains_each_iteration(context: ModuleContext, loop: RebindingLoop) -> bool:
    """A loop that fits or steps a model per iteration (k-fold, per-trial training) uses the
    callables it made before the next iteration rebinds their variables."""
    if isinstance(loop, COMPREHENSIONS):
        return False
    training = context.training_functions
    for node in context.walk_scope(loop):
        if isinstance(node, ast.Call):
            name = last_name(node.func)
            if node in context.step_markers or name in _TRAIN_CALLS:
                return True
            if training and any(f in training for f in context.calls_local_function(node)):
                return True  # train_one_epoch(model, loader, opt), which steps in its own loop
            if name == "train" and (node.args or node.keywords or isinstance(node.func, ast.Name)):
                return True  # train(model, loader), not the mode switch model.train()
    return False


def late_captures(context: ModuleContext, function: ast.AST) -> Iterator[tuple[ast.AST, list[str], str]]:
    """(loop, captured names, how the callable outlives it) for each loop around ``function``
    whose rebinding it would see late, innermost first (none for what is not a lambda or function)."""
    if not isinstance(function, _CLOSURES):
        return
    loops = _rebinding_loops(context, function)
    if not loops:
        return
    free = free_names(function)
    for loop in loops:
        rebound = _rebound(loop)
        captured = [name for name in free if name in rebound]
        if not captured or _trains_each_iteration(context, loop):
            continue
        if isinstance(function, ast.Lambda):
            how = _later_use(context, function, loop)
        else:
            how = _decorated_later(function) or _name_used_later(context, {function.name}, function, loop, 0)
        if how is not None:
            yield loop, captured, how


def _decorated_later(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``@model.register_forward_hook``-style or ignite ``@trainer.on(...)`` registration."""
    for decorator in function.decorator_list:
        func = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = last_name(func) or ""
        if name.startswith("register") or name == "on":
            return f"is registered by @{_callee(func)} and called later"
    return None
