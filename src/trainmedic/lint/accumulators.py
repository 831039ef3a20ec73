"""Lists and tensors that accumulate over training steps: the list a concatenation reads whole
(or the tensor it grows), what makes it longer or starts it again, and what else may change it or
the tensors put in it between two places. What TM106 reports, and what its fixer must prove before
it moves the concatenation."""

from __future__ import annotations

import ast

from trainmedic.lint.context import FUNCTIONS, ModuleContext
from trainmedic.lint.syntax import argument, keyword, names_in, target_nodes

_CONCATS = frozenset(
    f"{module}.{name}"
    for module, names in (
        ("torch", ("cat", "concat", "concatenate", "stack", "vstack", "hstack", "row_stack")),
        ("numpy", ("concatenate", "stack", "vstack", "hstack", "row_stack")),
    )
    for name in names
)
_COPIES = ("list", "tuple")
_GROW = frozenset({"append", "extend", "insert"})
#: Calls that keep a list bounded (a sliding window, a flush) or empty it.
_SHRINK = frozenset({"pop", "popleft", "clear", "remove"})


def concatenated_list(context: ModuleContext, call: ast.Call) -> ast.expr | None:
    """The list a concatenation reads whole: ``torch.cat(xs)``, ``np.stack(list(self.pool))``."""
    if context.qualname(call.func) not in _CONCATS:
        return None
    value = argument(call, 0, "tensors") or keyword(call, "arrays") or keyword(call, "tup")
    if isinstance(value, ast.Call) and len(value.args) == 1 and context.qualname(value.func) in _COPIES:
        value = value.args[0]
    return value if list_key(value) else None


def accumulated_tensor(context: ModuleContext, call: ast.Call) -> ast.expr | None:
    """``preds = torch.cat([preds, p])``: a tensor that grows by one concatenation per step."""
    parent = context.parent(call)
    if not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
        return None
    if context.qualname(call.func) not in _CONCATS:
        return None
    value = argument(call, 0, "tensors")
    key = list_key(parent.targets[0])
    if key is None or not isinstance(value, (ast.List, ast.Tuple)):
        return None
    return next((e for e in value.elts if list_key(e) == key), None)


def list_key(expr: ast.AST | None) -> str | None:
    """``xs`` or ``self.pool``: a name the code can append to."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return f"{expr.value.id}.{expr.attr}"
    return None


def grows_and_resets(
    context: ModuleContext, within: ast.AST, key: str
) -> tuple[list[ast.stmt | ast.expr], list[ast.stmt | ast.expr]]:
    """(growths, resets) of ``key`` in ``within``: appends, and anything that rebinds or shrinks it.
    ``xs = xs + [x]`` grows; ``xs = []`` or ``xs = xs[-100:]`` starts again or keeps a window."""
    grows: list[ast.stmt | ast.expr] = []
    resets: list[ast.stmt | ast.expr] = []
    for node in ast.walk(within):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and list_key(node.func.value) == key
        ):
            method = node.func.attr
            if method in _GROW:
                grows.append(node)
            elif method in _SHRINK:
                resets.append(node)
        elif isinstance(node, ast.AugAssign) and list_key(node.target) == key:
            (grows if isinstance(node.op, ast.Add) else resets).append(node)
        elif isinstance(node, ast.Delete) and any(
            list_key(getattr(t, "value", t)) == key for t in node.targets
        ):
            resets.append(node)  # del xs[:100], del xs
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(list_key(t) == key for t in targets):
                value = node.value
                growing = isinstance(value, ast.BinOp) and list_key(value.left) == key
                if isinstance(value, ast.Call) and accumulated_tensor(context, value) is not None:
                    growing = True
                (grows if growing else resets).append(node)
            elif any(isinstance(t, ast.Subscript) and list_key(t.value) == key for t in targets):
                resets.append(node)  # xs[:] = xs[-k:]
    return grows, resets


def grown_in_loop(context: ModuleContext, call: ast.Call, key: str) -> ast.stmt | ast.expr | None:
    """The append that makes ``key`` longer every step of the loop the concatenation runs in."""
    loop = next(context.enclosing_loops(call), None)
    if loop is None or loop not in context.step_loops:
        return None
    body = ast.Module(body=[*loop.body, *loop.orelse], type_ignores=[])
    grows, resets = grows_and_resets(context, body, key)
    grows = [g for g in grows if not context.is_rate_limited(g)]
    # A list made anew in the iteration (parts = [] ... torch.cat(parts)) costs one copy per step.
    if resets or not grows or _bounded(context, key):
        return None
    return grows[0]


def _bounded(context: ModuleContext, key: str) -> bool:
    """``window = deque(maxlen=100)`` anywhere in the module: appends drop the oldest entry, so
    the copy stays the same size. Matched by name alone: a miss only loses a finding."""
    for node in context.nodes(ast.Assign, ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if not isinstance(value, ast.Call) or not any(list_key(t) == key for t in targets):
            continue
        if context.qualname(value.func) not in ("collections.deque", "deque"):
            continue
        maxlen = argument(value, 1, "maxlen")
        if maxlen is not None and not (isinstance(maxlen, ast.Constant) and maxlen.value is None):
            return True
    return False


def grown_elsewhere(context: ModuleContext, call: ast.Call, key: str) -> ast.stmt | ast.expr | None:
    """A step-time method concatenates a pool that other methods append to (a replay pool)."""
    scope = context.scope_of(call)
    if next(context.enclosing_loops(call), None) is not None or context.step_context(call) is not scope:
        return None
    if not isinstance(scope, FUNCTIONS):
        return None
    if "." in key:
        owner = context.class_of(call)
        if owner is None or not key.startswith("self."):
            return None
        grows, resets = grows_and_resets(context, owner, key)
        # A flush in the same method (cat, then clear) or a window anywhere keeps the list short.
        resets = [r for r in resets if context.function_of(r) is scope or not _is_initial(context, r)]
    else:
        if key in _local_names(scope):
            return None
        grows, resets = grows_and_resets(context, context.tree, key)
        resets = [r for r in resets if context.function_of(r) is not None or not _is_initial(context, r)]
    if resets or not grows:
        return None
    return grows[0]


def _is_initial(context: ModuleContext, node: ast.AST) -> bool:
    """``self.pool = []`` in ``__init__`` (or ``pool = []`` at module level): where a list starts."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)):
        return False
    if not isinstance(node.value, (ast.List, ast.Call)):
        return False
    starts_empty = ("list", "collections.deque")
    # deque(maxlen=N) is a bounded window, not a list that starts empty and grows.
    if isinstance(node.value, ast.Call) and (
        context.qualname(node.value.func) not in starts_empty or keyword(node.value, "maxlen")
    ):
        return False
    function = context.function_of(node)
    return function is None or function.name in ("__init__", "reset", "setup", "__post_init__")


def _local_names(function: ast.AST) -> set[str]:
    names = {a.arg for a in ast.walk(function) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


# -- what else may change the list, or what was put in it ----------------------------------

#: Methods that may return their tensor itself or a view of its memory.
_VIEWS = frozenset(
    "detach view view_as reshape reshape_as cpu cuda to numpy squeeze unsqueeze flatten ravel permute "
    "transpose swapaxes t contiguous expand expand_as narrow select float double half bfloat16 long int "
    "type_as".split()
)
#: List methods and functions that only read the list they are given.
_LIST_READS = frozenset({"index", "count", "copy"})
_READERS = frozenset("len list tuple sorted sum min max iter enumerate zip print str repr".split())
#: numpy functions that write into their first argument.
_WRITES_FIRST = frozenset(
    {"numpy.copyto", "numpy.put", "numpy.place", "numpy.putmask", "numpy.random.shuffle"}
)


def read_keys(expr: ast.AST) -> set[str]:
    """The names and ``name.attr`` an expression reads."""
    keys = set()
    for node in ast.walk(expr):
        key = list_key(node)
        if key is not None and isinstance(getattr(node, "ctx", None), ast.Load):
            keys.add(key)
    return keys


def touches(context: ModuleContext, nodes: list[ast.AST], key: str) -> ast.AST | None:
    """A node that may change the list ``key``: it rebinds it, calls a method on it, stores into
    it, aliases it or hands it to a function that is not known to only read it; for ``self.pool``,
    a method call on ``self`` too; or a call of a function of this module that names it."""
    base = key.split(".")[0]
    for node in nodes:
        if (
            isinstance(node, (ast.Name, ast.Attribute))
            and list_key(node) == key
            and _may_change(context, node)
        ):
            return node
        if "." in key and isinstance(node, ast.Name) and node.id == base:
            parent = context.parent(node)
            if not isinstance(parent, ast.Attribute) or isinstance(context.parent(parent), ast.Call):
                return node
        if isinstance(node, ast.Call):
            for function in context.calls_local_function(node):
                if any(isinstance(n, ast.Name) and n.id == base for n in ast.walk(function)):
                    return node
    return None


def _may_change(context: ModuleContext, node: ast.Name | ast.Attribute) -> bool:
    """Whether this use of a list may change it (reading it, iterating it or concatenating it
    does not)."""
    if not isinstance(node.ctx, ast.Load):
        return True
    parent = context.parent(node)
    if isinstance(parent, ast.Attribute):
        called = isinstance(call := context.parent(parent), ast.Call) and call.func is parent
        return called and parent.attr not in _LIST_READS
    if isinstance(parent, ast.Subscript):
        return not isinstance(parent.ctx, ast.Load)
    if isinstance(parent, ast.keyword):
        parent = context.parent(parent)
    if isinstance(parent, ast.Call):
        return parent.func is node or (context.qualname(parent.func) not in _READERS | _CONCATS)
    return isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.withitem))


def rebinding(nodes: list[ast.AST], key: str) -> ast.AST | None:
    """A node that rebinds ``key`` (a name or ``name.attr``)."""
    for node in nodes:
        if (
            isinstance(node, (ast.Name, ast.Attribute))
            and not isinstance(node.ctx, ast.Load)
            and list_key(node) == key
        ):
            return node
    return None


def _root(expr: ast.AST) -> str | None:
    """``x.data[0]`` → ``x``."""
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def names_put_in(node: ast.AST) -> set[str]:
    """The names whose objects a growth (``xs.append(e)``, ``xs += [e]``) or a part puts in the list."""
    if isinstance(node, ast.Call):
        return set().union(*(names_in(a) for a in node.args)) if node.args else set()
    if isinstance(node, (ast.AugAssign, ast.Assign)):
        return names_in(node.value)
    return names_in(node)


def writes_in_place(context: ModuleContext, nodes: list[ast.AST], roots: set[str]) -> ast.AST | None:
    """A node that writes into an object reached from ``roots``: ``x += y``, ``x[i] = y``,
    ``x.add_(y)``, ``out=x``, ``np.copyto(x, y)``."""
    if not roots:
        return None
    for node in nodes:
        if isinstance(node, ast.AugAssign) and _root(node.target) in roots:
            return node
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for sub in (s for t in targets for s in target_nodes(t)):
                if isinstance(sub, (ast.Subscript, ast.Attribute)) and _root(sub) in roots:
                    return node
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr.endswith("_")
                and not func.attr.startswith("_")
                and _root(func.value) in roots
            ):
                return node
            if any(k.arg == "out" and _root(k.value) in roots for k in node.keywords):
                return node
            if context.qualname(func) in _WRITES_FIRST and node.args and _root(node.args[0]) in roots:
                return node
    return None


def reused_buffer(
    context: ModuleContext, part: ast.AST, inside: list[ast.AST], others: list[ast.AST]
) -> ast.AST | None:
    """A part that is (a view of) a variable the loop never rebinds, so the same buffer on every
    step, and that something in the loop is given or has a method called on: the call that may
    fill it in place."""
    base = _view_root(part)
    if base is None:
        return None
    if any(isinstance(n, ast.Name) and n.id == base and not isinstance(n.ctx, ast.Load) for n in inside):
        return None
    for node in others:
        if not isinstance(node, ast.Call):
            continue
        given = [*node.args, *(k.value for k in node.keywords)]
        if any(_root(a) == base for a in given):
            return node
        if isinstance(node.func, ast.Attribute) and _root(node.func.value) == base:
            return node
    return None


def _view_root(part: ast.AST) -> str | None:
    """``buf``, ``buf[None]``, ``self.buf.detach().cpu()``: the variable whose memory the part may
    share; None for a result that is a new tensor (``model(x)``, ``a + b``, ``x.clone()``)."""
    node = part
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS:
            node = node.func.value
        else:
            break
    return node.id if isinstance(node, ast.Name) else None
