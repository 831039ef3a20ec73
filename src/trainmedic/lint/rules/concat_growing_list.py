"""TM106: torch.cat / np.concatenate of a list that keeps growing, redone every training step."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import FUNCTIONS, ModuleContext
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import argument, keyword

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


def _listed(context: ModuleContext, call: ast.Call) -> ast.expr | None:
    """The list a concatenation reads whole: ``torch.cat(xs)``, ``np.stack(list(self.pool))``."""
    if context.qualname(call.func) not in _CONCATS:
        return None
    value = argument(call, 0, "tensors") or keyword(call, "arrays") or keyword(call, "tup")
    if isinstance(value, ast.Call) and len(value.args) == 1 and context.qualname(value.func) in _COPIES:
        value = value.args[0]
    return value if _key(value) else None


def _accumulated(context: ModuleContext, call: ast.Call) -> ast.expr | None:
    """``preds = torch.cat([preds, p])``: a tensor that grows by one concatenation per step."""
    parent = context.parent(call)
    if not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
        return None
    if context.qualname(call.func) not in _CONCATS:
        return None
    value = argument(call, 0, "tensors")
    key = _key(parent.targets[0])
    if key is None or not isinstance(value, (ast.List, ast.Tuple)):
        return None
    return next((e for e in value.elts if _key(e) == key), None)


def _key(expr: ast.AST | None) -> str | None:
    """``xs`` or ``self.pool``: a name the code can append to."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return f"{expr.value.id}.{expr.attr}"
    return None


def _changes(context: ModuleContext, within: ast.AST, key: str) -> tuple[list[ast.AST], list[ast.AST]]:
    """(growths, resets) of ``key`` in ``within``: appends, and anything that rebinds or shrinks it.
    ``xs = xs + [x]`` grows; ``xs = []`` or ``xs = xs[-100:]`` starts again or keeps a window."""
    grows: list[ast.AST] = []
    resets: list[ast.AST] = []
    for node in ast.walk(within):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and _key(func.value) == key:
            method = func.attr
            if method in _GROW:
                grows.append(node)
            elif method in _SHRINK:
                resets.append(node)
        elif isinstance(node, ast.AugAssign) and _key(node.target) == key:
            (grows if isinstance(node.op, ast.Add) else resets).append(node)
        elif isinstance(node, ast.Delete) and any(_key(getattr(t, "value", t)) == key for t in node.targets):
            resets.append(node)  # del xs[:100], del xs
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_key(t) == key for t in targets):
                value = node.value
                growing = isinstance(value, ast.BinOp) and _key(value.left) == key
                if isinstance(value, ast.Call) and _accumulated(context, value) is not None:
                    growing = True
                (grows if growing else resets).append(node)
            elif any(isinstance(t, ast.Subscript) and _key(t.value) == key for t in targets):
                resets.append(node)  # xs[:] = xs[-k:]
    return grows, resets


def _grown_in_loop(context: ModuleContext, call: ast.Call, key: str) -> ast.AST | None:
    """The append that makes ``key`` longer every step of the loop the concatenation runs in."""
    loop = next(context.enclosing_loops(call), None)
    if loop is None or loop not in context.step_loops:
        return None
    body = ast.Module(body=[*loop.body, *loop.orelse], type_ignores=[])
    grows, resets = _changes(context, body, key)
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
        if not isinstance(value, ast.Call) or not any(_key(t) == key for t in targets):
            continue
        if context.qualname(value.func) not in ("collections.deque", "deque"):
            continue
        maxlen = argument(value, 1, "maxlen")
        if maxlen is not None and not (isinstance(maxlen, ast.Constant) and maxlen.value is None):
            return True
    return False


def _grown_elsewhere(context: ModuleContext, call: ast.Call, key: str) -> ast.AST | None:
    """Seed 004 #2: a step-time method concatenates a pool that other methods append to."""
    scope = context.scope_of(call)
    if next(context.enclosing_loops(call), None) is not None or context.step_context(call) is not scope:
        return None
    if not isinstance(scope, FUNCTIONS):
        return None
    if "." in key:
        owner = context.class_of(call)
        if owner is None or not key.startswith("self."):
            return None
        grows, resets = _changes(context, owner, key)
        # A flush in the same method (cat, then clear) or a window anywhere keeps the list short.
        resets = [r for r in resets if context.function_of(r) is scope or not _is_initial(context, r)]
    else:
        if key in _local_names(scope):
            return None
        grows, resets = _changes(context, context.tree, key)
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


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for call in context.nodes(ast.Call):
        listed = _listed(context, call) or _accumulated(context, call)
        if listed is None or not context.runs_every_step(call):
            continue
        key = _key(listed)
        assert key is not None
        growth = _grown_in_loop(context, call, key) or _grown_elsewhere(context, call, key)
        if growth is None:
            continue
        func = ast.unparse(call.func)
        if growth is context.parent(call):
            message = (
                f"{key} = {func}([{key}, ...]) copies all of `{key}` on every training step as it grows: "
                "quadratic; collect the parts in a list and concatenate once after the loop, or keep a "
                "running total"
            )
        elif next(context.enclosing_loops(call), None) is not None:
            message = (
                f"{func}({key}) copies all of `{key}` on every training step while line {growth.lineno} "
                "appends to it: quadratic; concatenate once after the loop, or keep a running total on the "
                "device"
            )
        else:
            via = context.every_step_note(call)
            message = (
                f"{func}({key}) copies the whole of `{key}` (appended to at line {growth.lineno}) on every "
                f"training step{via}; concatenate once when it is complete (a finalize() step) and index the "
                "result"
            )
        yield call, message


RULE = Rule(
    code="TM106",
    name="concat-growing-list",
    summary="torch.cat / np.concatenate of a list that grows, redone every training step.",
    why=(
        "Concatenating a list copies every element into a new tensor. When the list gains an entry\n"
        "every step and is concatenated every step, step N copies N entries: the total is quadratic\n"
        "and the step time grows all run long. Seed 004 #2: torch.cat(self.x_pool) over a 512K-entry\n"
        "trajectory pool in the per-step sample() took ~0.5 s per step against ~0.05 s of\n"
        "forward/backward, so training ran 10x slower than necessary."
    ),
    fix=(
        "Concatenate once, when the list is complete (a finalize() method after the pool is built),\n"
        "then index the one tensor every step: idx = torch.randint(n, (batch,)); pool[idx].\n"
        "For running metrics, keep a running sum on the device instead of a list of every value."
    ),
    before="""
class TrajectoryPool:
    def __init__(self):
        self.x_pool = []

    def add(self, x):
        self.x_pool.append(x)

    def sample(self, batch_size):
        all_x = torch.cat(self.x_pool, dim=0)
        return all_x[torch.randint(0, all_x.shape[0], (batch_size,))]

for step in range(num_steps):
    x = pool.sample(256)
    loss = flow_loss(model, x)
    loss.backward()
    optimizer.step()
""",
    after="""
class TrajectoryPool:
    def __init__(self):
        self.x_pool = []

    def add(self, x):
        self.x_pool.append(x)

    def finalize(self):
        self.all_x = torch.cat(self.x_pool, dim=0)
        self.x_pool = None

    def sample(self, batch_size):
        return self.all_x[torch.randint(0, self.all_x.shape[0], (batch_size,))]

pool.finalize()
for step in range(num_steps):
    x = pool.sample(256)
    loss = flow_loss(model, x)
    loss.backward()
    optimizer.step()
""",
    check=check,
)
