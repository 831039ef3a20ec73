"""The repair TM107 and TM111 share: a statement that only reports (a ``print``, a log call, a
progress bar's postfix) put under ``if step % N == 0:`` in its training loop.

It is mechanical only where two things are provable from the source: the statement reports and
does nothing else (so running it on fewer steps changes what is printed, not what is trained), and
the training loop's step counter is in sight — ``for step, batch in enumerate(loader)``, ``for it
in range(n)``, or a counter the loop itself advances with ``+= 1``. Anything else keeps its finding,
with the reason.
"""

from __future__ import annotations

import ast
import re

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import block_of, guard_statements, owns_its_lines, statement_of
from trainmedic.lint.model import Fix
from trainmedic.lint.syntax import last_name

#: Steps between two reports after the repair: the common default of the examples we read (and
#: what the rules' cards show); the fix's description names it so it is easy to change.
LOG_EVERY = 100

#: logger.debug is left alone by TM111: it is off unless asked for, and then wanted every step.
LOG_LEVELS = frozenset({"info", "warning", "warn", "error", "critical", "exception"})
_LOGGER_NAME = re.compile(r"log", re.IGNORECASE)
#: Calls that only display or record a value: a progress bar's text, a TensorBoard scalar.
_DISPLAY_METHODS = frozenset(
    {"set_postfix", "set_postfix_str", "set_description", "set_description_str", "add_scalar", "add_scalars"}
)
_DISPLAY_FUNCTIONS = frozenset({"wandb.log", "mlflow.log_metric", "mlflow.log_metrics"})


def printer_name(context: ModuleContext, call: ast.Call) -> str | None:
    """``print()``, ``log.info()``, ``tqdm.write()``...: what TM111 calls a per-step print."""
    qualname = context.qualname(call.func) or ""
    if qualname in ("print", "pprint.pprint", "sys.stdout.write", "sys.stderr.write") or qualname.endswith(
        "tqdm.write"
    ):
        return qualname.rsplit(".", 1)[-1] + "()" if qualname != "print" else "print()"
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in LOG_LEVELS:
        receiver = last_name(func.value)
        if receiver and _LOGGER_NAME.search(receiver):
            return f"{receiver}.{func.attr}()"
    return None


def reports_only(context: ModuleContext, stmt: ast.stmt) -> bool:
    """A statement that is one call which prints, logs or displays, and whose arguments only read
    (no walrus, no call that could advance state other than formatting and reading values)."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    func = call.func
    reports = (
        printer_name(context, call) is not None
        or (context.qualname(func) or "") in _DISPLAY_FUNCTIONS
        or (isinstance(func, ast.Attribute) and func.attr in _DISPLAY_METHODS)
    )
    return reports and not any(
        isinstance(node, (ast.NamedExpr, ast.Yield, ast.Await)) for node in ast.walk(call)
    )


def gate(context: ModuleContext, node: ast.AST) -> Fix | str:
    """Put the reporting statement that holds ``node`` (and the reporting statements right next
    to it) under ``if <step> % LOG_EVERY == 0:``, or say why that is not mechanical."""
    stmt = statement_of(context, node)
    if stmt is None or not reports_only(context, stmt):
        return (
            "the value is used on every step, not only printed or logged; keep a running sum on the "
            "device (total += loss.detach()) and read it every N steps"
        )
    loop = context.step_context(stmt)
    if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
        caller = context.called_every_step_from(stmt)
        where = f" at line {caller.lineno}" if caller is not None else ""
        return (
            f"it runs every step because the training loop calls this function{where}, where the step "
            "counter is not in sight; report from the loop behind `if step % N == 0:`"
        )
    counter = step_counter(loop)
    if counter is None:
        return (
            "the training loop has no step counter in sight; loop with `for step, batch in "
            "enumerate(loader):` and report when step % N == 0"
        )
    group = _neighbours(context, stmt)
    if not all(owns_its_lines(context, s) for s in group):
        return "it shares its line with another statement; put it on its own line and run --fix again"
    edit = guard_statements(context, group, f"{counter} % {LOG_EVERY} == 0")
    lines = (
        f"line {group[0].lineno}" if len(group) == 1 else f"lines {group[0].lineno}-{group[-1].end_lineno}"
    )
    return Fix(f"report every {LOG_EVERY} steps: {lines} under `if {counter} % {LOG_EVERY} == 0:`", (edit,))


def step_counter(loop: ast.For | ast.AsyncFor | ast.While) -> str | None:
    """The name that counts the loop's steps: an ``enumerate`` index (also through ``tqdm(...)``),
    a ``range`` target, or a name the loop body advances with ``+= 1`` and assigns nowhere else."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        name = _iteration_counter(loop)
        if name is not None and name not in _assigned_in(loop.body):
            return name
    advanced = [
        stmt.target.id
        for stmt in loop.body
        if isinstance(stmt, ast.AugAssign)
        and isinstance(stmt.op, ast.Add)
        and isinstance(stmt.target, ast.Name)
        and isinstance(stmt.value, ast.Constant)
        and stmt.value.value == 1
    ]
    for name in advanced:
        if _assigned_in(loop.body).count(name) == 1:
            return name
    return None


def _iteration_counter(loop: ast.For | ast.AsyncFor) -> str | None:
    iterable = loop.iter
    # tqdm(enumerate(loader), total=...) and friends: a wrapper whose first argument is the loop's.
    if (
        isinstance(iterable, ast.Call)
        and iterable.args
        and isinstance(iterable.args[0], ast.Call)
        and last_name(iterable.func) in ("tqdm", "track", "progress_bar", "trange")
    ):
        iterable = iterable.args[0]
    if not isinstance(iterable, ast.Call) or not isinstance(iterable.func, ast.Name):
        return None
    target = loop.target
    if iterable.func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
        first = target.elts[0]
        return first.id if isinstance(first, ast.Name) else None
    if iterable.func.id in ("range", "trange") and isinstance(target, ast.Name):
        return target.id
    return None


def _assigned_in(body: list[ast.stmt]) -> list[str]:
    """Every plain name the loop body binds, once per binding (nested functions aside)."""
    names: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.append(node.id)
    return names


def _neighbours(context: ModuleContext, stmt: ast.stmt) -> list[ast.stmt]:
    """The run of reporting statements ``stmt`` sits in, in its block: three prints in a row go
    under one ``if``, not three."""
    block = block_of(context, stmt)
    at = next(i for i, s in enumerate(block) if s is stmt)
    start, end = at, at
    while start > 0 and reports_only(context, block[start - 1]):
        start -= 1
    while end + 1 < len(block) and reports_only(context, block[end + 1]):
        end += 1
    return block[start : end + 1]
