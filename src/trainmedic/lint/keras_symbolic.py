"""Which expressions of a module are Keras symbolic tensors (KerasTensors), by dataflow.

Followed in each function and the module: ``keras.Input(...)``, a Keras layer or model called on
one, ``model.output``, arithmetic and slices of one, and the return values and parameters of the
module's own helpers (``x = attention_block(x)`` makes ``x`` symbolic inside ``attention_block``).
A binding holds from where it takes effect, within the conditional blocks around it. Methods that
run on real tensors (``call``, ``train_step``, functions given to ``layers.Lambda``) are left out.
TM103 (``rules/tf_op_on_keras_tensor.py``) flags TensorFlow and torch ops on what this finds.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from typing import TypeAlias

from trainmedic.lint.context import FUNCTIONS, SCOPES, Function, ModuleContext
from trainmedic.lint.syntax import last_name

SYM, LIST = "symbolic", "list"
#: Where a binding takes effect, the conditional blocks around it, and the kind of value it binds.
_Binding = tuple[tuple[int, int], tuple[tuple[int, str], ...], "str | None"]
#: What bindings are followed in: the module, or one of its functions.
_Scope: TypeAlias = ast.Module | Function
_INPUTS = frozenset({"keras.Input", "keras.layers.Input"})
#: Methods whose arguments are real tensors at run time, whatever the module does around them.
_RUNTIME_METHODS = frozenset(
    {
        "call",
        "__call__",
        "train_step",
        "test_step",
        "predict_step",
        "compute_output_spec",
        "compute_output_shape",
    }
)
#: keras.ops / keras.backend (and tf) functions that give plain Python values for a symbolic tensor.
_STATIC = frozenset(
    {
        "shape",
        "int_shape",
        "ndim",
        "dtype",
        "is_tensor",
        "is_keras_tensor",
        "count_params",
        "standardize_dtype",
    }
)
#: tf functions that do not convert their argument to a tensor.
_NOT_OPS = (
    "tensorflow.nest.",
    "tensorflow.is_tensor",
    "tensorflow.TensorShape",
    "tensorflow.TensorSpec",
    "tensorflow.function",
    "tensorflow.config.",
    "tensorflow.io.gfile.",
    "tensorflow.get_static_value",
)
#: torch functions that take no tensor to convert (or are not ops at all).
_NOT_TORCH_OPS = (
    "torch.is_tensor",
    "torch.no_grad",
    "torch.enable_grad",
    "torch.device",
    "torch.Size",
    "torch.manual_seed",
    "torch.set_",
    "torch.get_",
    "torch.cuda.",
    "torch.backends.",
    "torch.jit.",
    "torch.compile",
    "torch.utils.",
    "torch.distributed.",
    "torch.autograd.",
    "torch.nn.Module",
    "torch.nn.Parameter",
    "torch.nn.init.",
    "torch.save",
    "torch.load",
    "torch.from_numpy",
    "torch.func.",
)
#: Statements whose blocks may or may not run. ``try/except*`` is Python 3.11+.
_BRANCHING = tuple(
    kind
    for kind in (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, getattr(ast, "TryStar", None), ast.Match)
    if kind is not None
) + (ast.match_case,)
_BLOCKS = ("body", "orelse", "handlers", "finalbody", "cases")
#: Deeper expressions than this (a 900-term sum is one) are not followed: their kind is unknown.
_MAX_DEPTH = 100
_GROWERS = frozenset({"append", "extend", "insert"})
_MODEL_ENDS = frozenset({"output", "input", "outputs", "inputs"})
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_BINDERS = (
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.NamedExpr,
    ast.For,
    ast.AsyncFor,
    ast.Call,
    *_COMPREHENSIONS,
)


class SymbolicTensors:
    """Which names hold symbolic tensors, scope by scope, with helpers' parameters and returns
    found by iterating over the module's call sites to a fixed point."""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self.params: dict[ast.AST, dict[str, str]] = defaultdict(dict)
        self.returns: set[ast.AST] = set()
        self._keras_names: dict[ast.AST, set[str]] = {}
        # kind() answers for the current state; any new binding, parameter or return starts a new one.
        self._memo: dict[tuple[ast.AST, ast.AST], tuple[int, str | None]] = {}
        self._state = 0
        self._chains: dict[ast.AST, tuple[tuple[int, str], ...]] = {}
        self._fields: dict[ast.AST, dict[int, str]] = {}
        #: The module's own Layer/Model subclasses: calling one on a symbolic tensor gives one.
        self._keras_classes = {
            c.name
            for c in context.nodes(ast.ClassDef)
            if any((context.qualname(base) or "").startswith("keras.") for base in c.bases)
        }
        functions = context.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
        excluded = {f for f in functions if f.name in _RUNTIME_METHODS}
        for call in context.nodes(ast.Call):  # functions handed to layers.Lambda get real tensors
            if last_name(call.func) == "Lambda":
                names = {a.id for a in arguments(call) if isinstance(a, ast.Name)}
                excluded |= {f for name in names for f in context.functions_by_name.get(name, ())}
        self.scopes: list[_Scope] = [context.tree, *(f for f in functions if f not in excluded)]
        self.bindings: dict[ast.AST, dict[str, list[_Binding]]] = {}
        for _ in range(6):
            before = (sum(len(p) for p in self.params.values()), len(self.returns))
            for scope in self.scopes:
                self._bind(scope)
            if (sum(len(p) for p in self.params.values()), len(self.returns)) == before:
                break

    # -- bindings --------------------------------------------------------------------------------

    def _bind(self, scope: _Scope) -> None:
        table: dict[str, list[_Binding]] = defaultdict(list)
        self.bindings[scope] = table
        self._state += 1
        if isinstance(scope, FUNCTIONS):  # the module has no parameters
            start = (scope.lineno, scope.col_offset)
            for name, kind in self.params[scope].items():
                self._add(table, name, (start, (), kind))
        binders = (n for n in self.context.walk_scope(scope) if isinstance(n, _BINDERS))
        events = sorted(binders, key=_takes_effect)
        for node in events:
            self._bind_one(scope, table, node)
        if isinstance(scope, FUNCTIONS):
            for child in self.context.walk_scope(scope):
                # Every return is looked at: return helper(x) also tells helper what x is.
                value = child.value if isinstance(child, ast.Return) else None
                if value is not None and self.kind(scope, value) and scope not in self.returns:
                    self.returns.add(scope)
                    self._state += 1

    def _bind_one(self, scope: ast.AST, table: dict, node: ast.AST) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            kind = self.kind(scope, node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                self._assign(scope, table, target, node.value, kind, (_end(node), self._chain(node)))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            kind = self.kind(scope, node.value) or self.kind(scope, node.target)
            self._add(table, node.target.id, (_end(node), self._chain(node), kind))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            kind = SYM if self.kind(scope, node.iter) else None
            self._assign(scope, table, node.target, None, kind, (_takes_effect(node), self._chain(node)))
        elif isinstance(node, _COMPREHENSIONS):
            for generator in node.generators:
                kind = SYM if self.kind(scope, generator.iter) else None
                at = (_takes_effect(node), self._chain(node))
                self._assign(scope, table, generator.target, None, kind, at)
        elif (
            isinstance(node, ast.Call)
            and (grown := _grown(node)) is not None
            and any(self.kind(scope, a) for a in node.args)
        ):
            # outs.append(x) makes outs a list of symbolic tensors (tf.concat(outs) fails too).
            self._add(table, grown, (_end(node), (), LIST))  # adds, never replaces

    def _add(self, table: dict, name: str, binding: _Binding) -> None:
        table[name].append(binding)
        self._state += 1

    def _assign(
        self, scope: ast.AST, table: dict, target: ast.AST, value: ast.AST | None, kind: str | None, at: tuple
    ) -> None:
        if isinstance(target, ast.Name):
            self._add(table, target.id, (*at, kind))
        elif isinstance(target, (ast.Tuple, ast.List)):
            # a, b = x, y pairs up; q, k = split_heads(x) unpacks symbolic values.
            values = (
                value.elts
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                else None
            )
            for index, element in enumerate(target.elts):
                element = element.value if isinstance(element, ast.Starred) else element
                if values is not None:
                    self._assign(scope, table, element, values[index], self.kind(scope, values[index]), at)
                else:
                    self._assign(scope, table, element, None, SYM if kind else None, at)

    # -- expressions -----------------------------------------------------------------------------

    def kind(self, scope: ast.AST, expr: ast.AST, depth: int = 0) -> str | None:
        """SYM for a symbolic tensor, LIST for a list or tuple holding one, else None."""
        key = (scope, expr)
        state, known = self._memo.get(key, (-1, None))
        if state == self._state:
            return known
        if depth > _MAX_DEPTH:
            return None
        state = self._state
        known = self._kind(scope, expr, depth + 1)
        if state == self._state:  # nothing was learnt meanwhile (a helper's return, a parameter)
            self._memo[key] = (state, known)
        return known

    def _kind(self, scope: ast.AST, expr: ast.AST, depth: int) -> str | None:
        if isinstance(expr, ast.Name):
            return self._lookup(scope, expr)
        if isinstance(expr, ast.Call):
            return self._call_kind(scope, expr, depth)
        if isinstance(expr, ast.BinOp):
            # a + b + c + ... nests to the left: walk the chain, not the recursion limit.
            operands = []
            while isinstance(expr, ast.BinOp):
                operands.append(expr.right)
                expr = expr.left
            operands.append(expr)
            return SYM if any(self.kind(scope, e, depth) for e in reversed(operands)) else None
        if isinstance(expr, ast.UnaryOp):
            return SYM if self.kind(scope, expr.operand, depth) else None
        if isinstance(expr, ast.Subscript):
            return SYM if self.kind(scope, expr.value, depth) else None
        if isinstance(expr, (ast.List, ast.Tuple)):
            return LIST if any(self.kind(scope, e, depth) for e in expr.elts) else None
        if isinstance(expr, ast.Starred):
            return self.kind(scope, expr.value, depth)
        if isinstance(expr, ast.IfExp):
            return self.kind(scope, expr.body, depth) or self.kind(scope, expr.orelse, depth)
        if isinstance(expr, ast.NamedExpr):
            return self.kind(scope, expr.value, depth)
        # base_model.output of a keras.applications / keras.Model built in this scope.
        if (
            isinstance(expr, ast.Attribute)
            and expr.attr in _MODEL_ENDS
            and self._is_keras_object(scope, expr.value)
        ):
            return SYM if expr.attr in ("output", "input") else LIST
        return None

    def _lookup(self, scope: ast.AST, name: ast.Name) -> str | None:
        """The kind the latest bindings before ``name`` give it. A binding in an ``if`` branch (or a
        loop body) that does not hold the use only counts where every path agrees on the kind."""
        at, chain, kind = (name.lineno, name.col_offset), self._chain(name), None
        for position, blocks, bound in self.bindings.get(scope, {}).get(name.id, ()):
            if position <= at:
                kind = bound if chain[: len(blocks)] == blocks or bound == kind else None
        return kind

    def _chain(self, node: ast.AST) -> tuple[tuple[int, str], ...]:
        """The conditional blocks (if/else branches, loop bodies, try clauses) around ``node``.
        Built from the parent's chain and memoised: every name of a 2,000-term sum asks."""
        path, current = [], node
        while current not in self._chains:
            parent = self.context.parent(current)
            if parent is None or isinstance(parent, (*SCOPES, ast.Module)):
                self._chains[current] = ()
                break
            path.append((current, parent))
            current = parent
        for child, parent in reversed(path):
            blocks = self._chains[parent]
            if isinstance(parent, _BRANCHING):
                if parent not in self._fields:
                    self._fields[parent] = {
                        id(item): field for field in _BLOCKS for item in getattr(parent, field, ())
                    }
                field = self._fields[parent].get(id(child))
                if field is not None:  # not the if's test or the loop's iterable, which always run
                    blocks = (*blocks, (id(parent), field))
            self._chains[child] = blocks
        return self._chains[node]

    def _call_kind(self, scope: ast.AST, call: ast.Call, depth: int) -> str | None:
        qualname = self.context.qualname(call.func) or ""
        if qualname in _INPUTS:
            return SYM
        symbolic_args = [a for a in arguments(call) if self.kind(scope, a, depth)]
        if qualname.startswith(("keras.ops.", "keras.backend.")):
            return SYM if symbolic_args and qualname.rsplit(".", 1)[-1] not in _STATIC else None
        local = self.context.calls_local_function(call)
        if local:
            self._propagate(scope, call, local, depth)
            return SYM if any(f in self.returns for f in local) else None
        if not symbolic_args:
            return None
        if is_tf_op(qualname):
            # Flagged below; its result still flows on (Keras 2 made it a KerasTensor), except a
            # shape, which the fix turns into plain integers.
            return None if qualname.rsplit(".", 1)[-1] in _STATIC else SYM
        # A Keras layer or model applied to a symbolic tensor: layers.Dense(8)(x), conv(x), self.block(x).
        if self._is_keras_object(scope, call.func):
            return SYM
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        return SYM if isinstance(receiver, ast.Name) and receiver.id == "self" else None

    def _is_keras_object(self, scope: ast.AST, expr: ast.AST) -> bool:
        """``layers.Conv2D(...)``, or a name this scope bound to one; ``model.get_layer(...)``."""
        if isinstance(expr, ast.Call):
            qualname = self.context.qualname(expr.func) or ""
            if qualname.startswith("keras.") and not qualname.startswith(("keras.ops.", "keras.backend.")):
                return True
            if isinstance(expr.func, ast.Name) and expr.func.id in self._keras_classes:
                return True
            return isinstance(expr.func, ast.Attribute) and expr.func.attr == "get_layer"
        if isinstance(expr, ast.Name):
            if scope not in self._keras_names:
                assigns = [n for n in self.context.walk_scope(scope) if isinstance(n, ast.Assign)]
                self._keras_names[scope] = {
                    target.id
                    for node in assigns
                    if isinstance(node.value, ast.Call) and self._is_keras_object(scope, node.value)
                    for target in node.targets
                    if isinstance(target, ast.Name)
                }
            return expr.id in self._keras_names[scope]
        return False

    def _propagate(self, scope: ast.AST, call: ast.Call, functions: list[Function], depth: int) -> None:
        for function in functions:
            if function not in self.scopes:
                continue
            params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
            if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute):
                params = params[1:]
            for index, argument in enumerate(call.args):
                if isinstance(argument, ast.Starred) or index >= len(params):
                    break
                if kind := self.kind(scope, argument, depth):
                    self._learn(function, params[index], kind)
            for keyword in call.keywords:
                if (
                    keyword.arg is not None  # a **kwargs argument
                    and keyword.arg in params
                    and (kind := self.kind(scope, keyword.value, depth))
                ):
                    self._learn(function, keyword.arg, kind)

    def _learn(self, function: ast.AST, param: str, kind: str) -> None:
        if self.params[function].get(param) != kind:
            self.params[function][param] = kind
            self._state += 1


def arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def _grown(call: ast.Call) -> str | None:
    """The name of the list ``outs.append(...)`` / ``extend`` / ``insert`` grows, else None."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _GROWERS and isinstance(func.value, ast.Name):
        return func.value.id
    return None


def _end(node: ast.stmt | ast.expr) -> tuple[int, int]:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


def _takes_effect(node: ast.stmt | ast.expr) -> tuple[int, int]:
    """Where a binding starts to hold: after its statement, or before a loop's body."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return _end(node.target)
    if isinstance(node, _COMPREHENSIONS):
        return (node.lineno, node.col_offset)
    return _end(node)


def is_tf_op(qualname: str) -> bool:
    """A TensorFlow op, or a torch one (the same mistake on Keras 3's torch backend)."""
    if qualname.startswith("torch."):
        return not qualname.startswith(_NOT_TORCH_OPS)
    return (
        qualname.startswith("tensorflow.") and ".keras" not in qualname and not qualname.startswith(_NOT_OPS)
    )
