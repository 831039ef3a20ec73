"""One parsed module and the facts every rule asks about it.

The facts that make these rules worth more than a generic linter live here: which loops are
*training* loops (their bodies run once per optimisation step), which functions run once per step
(``training_step``, a ``train_step`` helper, an LBFGS closure), and whether a statement in such a
loop is rate-limited by an ``if step % N == 0`` guard. Rules never walk parents themselves.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, TypeAlias, TypeVar, overload

from trainmedic.lint.imports import import_map, normalise
from trainmedic.lint.syntax import is_rate_limit, last_name

N = TypeVar("N", bound=ast.AST)
N1 = TypeVar("N1", bound=ast.AST)
N2 = TypeVar("N2", bound=ast.AST)
N3 = TypeVar("N3", bound=ast.AST)
Function: TypeAlias = ast.FunctionDef | ast.AsyncFunctionDef
Loop: TypeAlias = ast.For | ast.AsyncFor | ast.While

LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Bodies that run at another time than the code around them.
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)

#: Functions that frameworks or convention call once per optimisation step.
STEP_FUNCTION_NAMES = frozenset(
    {"train_step", "training_step", "train_batch", "train_on_batch", "train_one_step", "training_step_end"}
)
#: Calls that *are* a step wherever they appear (Keras and TF custom loops).
_STEP_METHODS = frozenset({"train_on_batch", "apply_gradients"})
#: Names of step helpers that other modules call: ``update``, ``train_batch``, an LBFGS ``closure``.
_STEP_HELPER_NAME = re.compile(r"step|update|batch|iter|closure", re.IGNORECASE)
_OPTIMIZER_NAME = re.compile(r"(^|_)(opt|optim|optimizer|optimiser)s?(_|$)|optim", re.IGNORECASE)
_SCHEDULER_NAME = re.compile(r"sched|lr_|warmup", re.IGNORECASE)
#: Method names every framework object has: ``model.train()`` must not reach the user's ``train``.
_COMMON_METHODS = frozenset(
    {
        "train",
        "eval",
        "to",
        "cuda",
        "cpu",
        "step",
        "zero_grad",
        "forward",
        "parameters",
        "named_parameters",
        "state_dict",
        "load_state_dict",
        "backward",
        "item",
        "update",
        "append",
        "extend",
        "add",
        "get",
        "set",
        "save",
        "load",
        "log",
        "close",
        "reset",
        "run",
        "fit",
        "predict",
        "evaluate",
        "call",
        "build",
        "compile",
        "apply",
        "items",
        "keys",
        "values",
        "copy",
        "format",
        "write",
        "read",
        "sum",
        "mean",
        "init",
        "setup",
    }
)
#: Decorators that trace a function into a graph: its Python code runs once, not every step.
_TRACING_DECORATORS = frozenset({"tensorflow.function", "jax.jit", "jax.pmap", "jax.pjit", "flax.linen.jit"})


class ModuleContext:
    """A module's tree with parent links, resolved imports, and its training loops."""

    def __init__(self, tree: ast.Module, source: str, path: str) -> None:
        self.tree = tree
        self.source = source
        self.path = path
        # Split on what Python counts as a line end only: str.splitlines() also splits on form
        # feeds and U+2028, which would shift every later line away from ast's numbering.
        self.lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._parents: dict[ast.AST, ast.AST] = {}
        self._by_type: dict[type, list[ast.AST]] = defaultdict(list)
        #: The field of its parent each node sits in ("body", "orelse", "test"...): asking "is
        #: this in the loop's body" is then one lookup, not a scan of a 10,000-statement body.
        self._field: dict[ast.AST, str] = {}
        for node in ast.walk(tree):
            self._by_type[type(node)].append(node)
            for name, value in ast.iter_fields(node):
                for child in value if isinstance(value, list) else (value,):
                    if isinstance(child, ast.AST):
                        self._parents[child] = node
                        self._field[child] = name
        self._sorted: dict[tuple[type, ...], list[ast.AST]] = {}
        self._scope_nodes: dict[ast.AST, tuple[ast.AST, ...]] = {}
        self.imports = import_map(tree)
        self.functions_by_name: dict[str, list[Function]] = defaultdict(list)
        for function in self.nodes(*FUNCTIONS):
            self.functions_by_name[function.name].append(function)
        self._instances = self._local_class_instances()
        self._optimizer_names = self._names_bound_to_optimizers()
        self.step_markers, self.step_functions, self.step_loops = self._find_training_loops()
        #: Functions that train: a step anywhere in their body, loops included, or a call to
        #: such a function (``train_one_epoch``, ``run_fold``).
        self.training_functions = self._find_training_functions()
        #: Functions that run every step because a training loop calls them (not behind a
        #: rate-limiting ``if``), mapped to the call that makes them so.
        self.per_step_callers: dict[ast.AST, ast.Call] = {}
        self._find_per_step_callees()

    # -- navigation ---------------------------------------------------------------------------

    # One overload per count of types, so that ``nodes(ast.Import, ast.ImportFrom)`` is a list of
    # either, not of their common base (``ast.stmt``, which has neither's fields).
    @overload
    def nodes(self, kind: type[N1], /) -> list[N1]: ...
    @overload
    def nodes(self, kind: type[N1], other: type[N2], /) -> list[N1 | N2]: ...
    @overload
    def nodes(self, kind: type[N1], other: type[N2], third: type[N3], /) -> list[N1 | N2 | N3]: ...
    @overload
    def nodes(self, *types: type[N]) -> list[N]: ...

    def nodes(self, *types: type[ast.AST]) -> list[Any]:
        """Every node of these types, in source order (a fresh list: callers may change it)."""
        # list[Any]: the cache holds plain AST nodes; what they are is what the overloads say,
        # since every list holds only nodes of the types it is keyed by.
        found = self._sorted.get(types)
        if found is None:
            found = [node for kind in types for node in self._by_type.get(kind, ())]
            found.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
            self._sorted[types] = found
        return list(found)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function, lambda or class whose body holds ``node`` (the module at top level)."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, SCOPES):
                return ancestor
        return self.tree

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, FUNCTIONS):
                return ancestor
        return None

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, ast.ClassDef):
                return ancestor
        return None

    def walk_scope(self, scope: ast.AST) -> tuple[ast.AST, ...]:
        """The nodes of a scope's own body, not those of functions, lambdas or classes inside it
        (the inner scope's own node is included). Cached: rules ask for the same scopes often."""
        found = self._scope_nodes.get(scope)
        if found is None:
            nodes, stack = [], list(ast.iter_child_nodes(scope))
            while stack:
                node = stack.pop()
                nodes.append(node)
                if not isinstance(node, SCOPES):
                    stack.extend(ast.iter_child_nodes(node))
            found = self._scope_nodes[scope] = tuple(nodes)
        return found

    def enclosing_loops(self, node: ast.AST) -> Iterator[Loop]:
        """Loops whose *repeated part* holds ``node``, innermost first, within its own scope.

        A ``for`` loop's iterable is evaluated once, so it is not inside the loop; a ``while``
        loop's test runs every iteration, so it is; an ``else:`` block runs once, after the loop.
        """
        child = node
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, SCOPES):
                return
            if isinstance(ancestor, (ast.For, ast.AsyncFor)) and self._field.get(child) == "body":
                yield ancestor
            elif isinstance(ancestor, ast.While) and self._field.get(child) != "orelse":
                yield ancestor
            child = ancestor

    # -- names --------------------------------------------------------------------------------

    def qualname(self, expr: ast.AST) -> str | None:
        """``np.concatenate`` → ``numpy.concatenate``, through the module's imports and aliases.

        Names that were not imported come back as written (``open``, ``print``, ``model``);
        an expression that is not a dotted name (a call, a subscript) gives None.
        """
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        head = self.imports.get(expr.id, expr.id)
        return normalise(".".join([head, *reversed(parts)]))

    def is_optimizer(self, expr: ast.AST) -> bool:
        """A name that holds an optimizer: built from ``torch.optim``, or named like one."""
        name = last_name(expr)
        if name is None or _SCHEDULER_NAME.search(name):
            return False
        return name in self._optimizer_names or bool(_OPTIMIZER_NAME.search(name))

    # -- training loops -----------------------------------------------------------------------

    def is_per_step(self, node: ast.AST) -> bool:
        """True when ``node`` runs once (or more) per optimisation step."""
        return self.step_context(node) is not None

    def step_context(self, node: ast.AST) -> ast.AST | None:
        """The training loop or step function that makes ``node`` run every step, else None.

        Python code in a traced function (``@tf.function``, ``@jax.jit``, a Keras ``train_step``
        override) runs once, while the graph is built; the graph is what runs every step."""
        if self._traced(self.scope_of(node)):
            return None
        for loop in self.enclosing_loops(node):
            if loop in self.step_loops:
                return loop
        scope = self.scope_of(node)
        if scope in self.step_functions or scope in self.per_step_callers:
            return scope
        return None

    def runs_every_step(self, node: ast.AST) -> bool:
        """Per step and not behind a rate limit: what every per-step rule asks first."""
        return self.is_per_step(node) and not self.is_rate_limited(node)

    def every_step_note(self, node: ast.AST) -> str:
        """For messages: " (this function is called every step at line N)" when ``node`` runs
        every step only because a training loop calls its function, else ""."""
        caller = self.called_every_step_from(node)
        return f" (this function is called every step at line {caller.lineno})" if caller is not None else ""

    def called_every_step_from(self, node: ast.AST) -> ast.Call | None:
        """When ``node`` runs every step only because its function is called from a training
        loop, the call that does it (for messages: "called every step from line N")."""
        scope = self.scope_of(node)
        if self.step_context(node) is scope:
            return self.per_step_callers.get(scope)
        return None

    def is_rate_limited(self, node: ast.AST) -> bool:
        """True when something between ``node`` and its training loop lets it run only on some
        steps: an ``if step % N == 0``, ``if it % log_interval == 0 and master``, ``if verbose``,
        ``if i == len(loader) - 1`` (the ``else`` branch of such a test runs on most steps); an
        ``except`` block; an ``if`` whose block ends the step or the loop (``break``, ``return``,
        ``raise``, ``continue``, ``sys.exit()``: "solved", "loss is NaN")."""
        context = self.step_context(node)
        child = node
        for ancestor in self.ancestors(node):
            if ancestor is context or isinstance(ancestor, SCOPES):
                return False
            if isinstance(ancestor, ast.ExceptHandler):
                return True
            if isinstance(ancestor, (ast.If, ast.IfExp)) and self._field.get(child) == "body":
                if is_rate_limit(ancestor.test) or (
                    isinstance(ancestor, ast.If) and self._leaves(ancestor.body)
                ):
                    return True
            child = ancestor
        return False

    def _leaves(self, body: list[ast.stmt]) -> bool:
        last = body[-1]
        if isinstance(last, (ast.Break, ast.Continue, ast.Return, ast.Raise)):
            return True
        return (
            isinstance(last, ast.Expr)
            and isinstance(last.value, ast.Call)
            and (self.qualname(last.value.func) in ("sys.exit", "exit", "quit", "os._exit"))
        )

    def calls_local_function(self, call: ast.Call) -> list[Function]:
        """The module's own functions this call may reach, matched by name: ``helper()`` reaches
        plain functions, ``self.helper()`` the methods, ``pool.sample()`` the methods of the
        local class ``pool`` was built from — or, when that is unknown, the one local class that
        has such a method and a name not every framework object has (``train``, ``step``...)."""
        func = call.func
        if isinstance(func, ast.Name):
            return [
                f
                for f in self.functions_by_name.get(func.id, ())
                if not isinstance(self.parent(f), ast.ClassDef)
            ]
        if not isinstance(func, ast.Attribute) or func.attr.startswith("__"):
            return []
        # Each method and the class it is defined in.
        owners = {
            f: owner
            for f in self.functions_by_name.get(func.attr, ())
            if isinstance(owner := self.parent(f), ast.ClassDef)
        }
        methods = list(owners)
        if not methods:
            return []
        if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return methods
        classes = self._instances.get(last_name(func.value) or "", set())
        if classes:
            return [f for f in methods if owners[f].name in classes]
        if func.attr in _COMMON_METHODS or len(set(owners.values())) > 1:
            return []
        return methods

    def _local_class_instances(self) -> dict[str, set[str]]:
        """``pool = TrajectoryPool(...)`` / ``self.pool = TrajectoryPool(...)`` → {"pool": {"TrajectoryPool"}}."""
        classes = {node.name for node in self.nodes(ast.ClassDef)}
        instances: dict[str, set[str]] = defaultdict(set)
        for assign in self.nodes(ast.Assign):
            if isinstance(assign.value, ast.Call) and (name := last_name(assign.value.func)) in classes:
                for target in assign.targets:
                    if (bound := last_name(target)) is not None:
                        instances[bound].add(name)
        return instances

    def _traced(self, scope: ast.AST) -> bool:
        if not isinstance(scope, FUNCTIONS):
            return False
        for decorator in scope.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if (self.qualname(target) or "") in _TRACING_DECORATORS:
                return True
        owner = self.parent(scope)
        if scope.name in ("train_step", "test_step", "predict_step") and isinstance(owner, ast.ClassDef):
            return any((self.qualname(base) or "").startswith("keras.") for base in owner.bases)
        return False

    def _find_per_step_callees(self) -> None:
        # A worklist: every scope once, and a function again once it turns out to run per step
        # (its calls outside loops were not per-step the first time).
        pending: list[ast.AST] = [self.tree, *self.nodes(*FUNCTIONS)]
        while pending:
            scope = pending.pop()
            for node in self.walk_scope(scope):
                if not isinstance(node, ast.Call):
                    continue
                callees = [
                    f
                    for f in self.calls_local_function(node)
                    if f not in self.step_functions and f not in self.per_step_callers and f is not scope
                ]
                if callees and self.runs_every_step(node):
                    for function in callees:
                        self.per_step_callers[function] = node
                        pending.append(function)

    def _names_bound_to_optimizers(self) -> set[str]:
        names: set[str] = set()
        for assign in self.nodes(ast.Assign):
            if isinstance(assign.value, ast.Call):
                qualname = self.qualname(assign.value.func) or ""
                if qualname.startswith("torch.optim.") and ".lr_scheduler" not in qualname:
                    names.update(n for t in assign.targets if (n := last_name(t)))
        return names

    def _is_direct_step(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute):
            if func.attr == "backward" or func.attr in _STEP_METHODS:
                return True
            if func.attr == "gradient" and "tape" in (last_name(func.value) or "").lower():
                return True
            if func.attr == "step":
                # optimizer.step(), and scaler.step(optimizer) of mixed precision.
                return self.is_optimizer(func.value) or any(self.is_optimizer(a) for a in call.args[:1])
        qualname = self.qualname(func)
        if qualname == "torch.autograd.backward":
            return True
        name = last_name(func)
        return name in STEP_FUNCTION_NAMES

    def callers(self, function: ast.AST) -> list[ast.Call]:
        """The calls of a function of this module (``train_one_epoch(...)``), found once for all rules."""
        return self._callers.get(function, [])

    def _find_training_loops(self) -> tuple[set[ast.Call], set[Function], set[Loop]]:
        calls = self.nodes(ast.Call)
        scope = {call: self.scope_of(call) for call in calls}
        in_loop = {call: next(self.enclosing_loops(call), None) is not None for call in calls}
        callers: dict[ast.AST, list[ast.Call]] = defaultdict(list)
        for call in calls:
            for function in self.calls_local_function(call):
                callers[function].append(call)
        direct = {call for call in calls if self._is_direct_step(call)}
        # Functions that do one step (outside any loop of theirs), directly or through helpers
        # of helpers: ``run_batch`` → ``backward_and_step`` → ``loss.backward()``. Worklists
        # keep a chain of N helpers linear.
        one_step = {s for c in direct if not in_loop[c] and isinstance(s := scope[c], FUNCTIONS)}
        pending = list(one_step)
        while pending:
            function = pending.pop()
            for call in callers[function]:
                caller = scope[call]
                if isinstance(caller, FUNCTIONS) and caller not in one_step and not in_loop[call]:
                    one_step.add(caller)
                    pending.append(caller)
        # Of those, the ones that run every step: called from a loop or from another step
        # function (or, called from nowhere here, named like a step helper).
        step_functions = {f for f in self.nodes(*FUNCTIONS) if f.name in STEP_FUNCTION_NAMES}
        step_functions |= {f for f in one_step if self._runs_every_step(f, callers[f], in_loop)}
        callees: dict[ast.AST, set[Function]] = defaultdict(set)
        for function in one_step:
            for call in callers[function]:
                callees[scope[call]].add(function)
        pending = list(step_functions)
        while pending:
            function = pending.pop()
            for callee in callees[function] - step_functions:
                step_functions.add(callee)
                pending.append(callee)
        self._callers = callers
        markers = set(direct)
        for function in step_functions:
            markers.update(callers[function])
        loops: set[Loop] = set()
        for call in markers:
            innermost = next(self.enclosing_loops(call), None)
            if innermost is not None:
                loops.add(innermost)
        return markers, step_functions, loops

    def _runs_every_step(
        self, function: Function, callers: list[ast.Call], in_loop: dict[ast.Call, bool]
    ) -> bool:
        """A function that does one step is a step function when it is called from a loop (or,
        see the caller, from another step function). One nobody in this module calls is judged
        by its name: a ``train_batch``/``update``/``closure`` helper is, a ``test_backward`` or a
        one-off full-batch ``fit_once`` is not."""
        if callers:
            return any(in_loop[call] for call in callers)
        return not function.name.startswith("test") and bool(_STEP_HELPER_NAME.search(function.name))

    def _find_training_functions(self) -> set[Function]:
        training = {
            scope for call in self.step_markers if isinstance(scope := self.function_of(call), FUNCTIONS)
        }
        pending = list(training)
        while pending:
            function = pending.pop()
            for call in self._callers.get(function, ()):
                caller = self.function_of(call)
                if caller is not None and caller not in training:
                    training.add(caller)
                    pending.append(caller)
        return training
