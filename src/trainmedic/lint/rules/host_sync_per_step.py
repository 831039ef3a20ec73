"""TM107: host syncs (.item(), .cpu(), float(loss), print(loss)) on every training step."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from trainmedic.lint.context import FUNCTIONS, SCOPES, ModuleContext
from trainmedic.lint.fixers.step_gate import gate
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import bound_names, keyword, last_name, string_value

# Where a value lives, as far as the module's own code shows. OTHER is a Python number, a shape, a
# string: nothing to wait for. OBJECT is a model, optimizer or other instance: calling a model gives
# a device tensor, but its attributes (config, param_groups) and what it is passed to do not.
# UNKNOWN (a parameter, a batch from a loader) is none of these for sure.
DEVICE, CPU, OTHER, OBJECT, UNKNOWN = "device", "cpu", "other", "object", "unknown"

_GPU_STRING = re.compile(r"^(/?(device:)?(cuda|gpu)(:\d+)?)$", re.IGNORECASE)
_DEVICE_NAME = re.compile(r"device|^dev$|cuda|gpu", re.IGNORECASE)
#: Calls of an instance (``model(x)``, ``self.net(x)``, ``criterion(out, y)``), not of a class (``Net()``).
_MODEL_CALLEE = re.compile(r"(^|_)(model|net|network|module|self|criterion|loss|loss_fn|lossfn)$")
_MODULE_NAME = re.compile(
    r"(^|_)(model|net|network|module|encoder|decoder|backbone|generator|discriminator)$|^net[A-Z]?$"
)
_LOSS_NAME = re.compile(r"(^|_)loss$", re.IGNORECASE)
_FACTORIES = frozenset(
    {
        "tensor",
        "as_tensor",
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "linspace",
        "rand",
        "randn",
        "randint",
        "randperm",
        "eye",
        "zeros_like",
        "ones_like",
        "from_numpy",
    }
)
_PLAIN_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "__class__"})
#: Methods whose result is a Python value (Keras' train_on_batch returns NumPy scalars).
_PLAIN_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "nelement",
        "item",
        "tolist",
        "backward",
        "step",
        "zero_grad",
        "train_on_batch",
        "test_on_batch",
        "predict_on_batch",
        "fit",
        "evaluate",
        "get_last_lr",
    }
)
_PLAIN_BUILTINS = frozenset({"float", "int", "len", "str", "bool", "round", "repr", "range", "isinstance"})
#: Calls whose result holds their arguments' values.
_CONTAINERS = frozenset({"enumerate", "zip", "iter", "next", "list", "tuple", "sorted", "reversed", "dict"})
#: The values an expression is made of: x[i], -x, a + b, a < b, x if c else y, (a, b), [f(x) for ...].
_PARTS = {
    ast.Subscript: ("value",),
    ast.Starred: ("value",),
    ast.Await: ("value",),
    ast.UnaryOp: ("operand",),
    ast.BinOp: ("left", "right"),
    ast.Compare: ("left", "comparators"),
    ast.IfExp: ("body", "orelse"),
    ast.Tuple: ("elts",),
    ast.List: ("elts",),
    ast.Set: ("elts",),
    ast.Dict: ("values",),
    ast.ListComp: ("elt",),
    ast.GeneratorExp: ("elt",),
    ast.SetComp: ("elt",),
    ast.DictComp: ("value",),
}
#: (where the binding takes effect, the statement, loop or function that binds, the value bound).
_Binding = tuple[tuple[int, int], ast.AST, "ast.AST | None"]


def _uses_gpu(context: ModuleContext) -> bool:
    """The module puts work on a GPU: without that a sync costs nothing."""
    strings = (c.value for c in context.nodes(ast.Constant) if isinstance(c.value, str))
    if any(_GPU_STRING.match(text.strip()) for text in strings):
        return True
    for call in context.nodes(ast.Call):
        func, qualname = call.func, context.qualname(call.func) or ""
        if qualname in ("torch.device", "accelerate.Accelerator") or qualname.startswith("torch.cuda."):
            return True
        if (isinstance(func, ast.Attribute) and func.attr == "cuda") or keyword(call, "gpus") is not None:
            return True
        target = call.args[0] if isinstance(func, ast.Attribute) and func.attr == "to" and call.args else None
        device = keyword(call, "device") or target
        if device is not None and _DEVICE_NAME.search(last_name(device) or ""):
            return True
    return False


def _combine(classes: list[str]) -> str:
    classes = [UNKNOWN if c == OBJECT else c for c in classes]
    if DEVICE in classes:
        return DEVICE
    if all(c == OTHER for c in classes):
        return OTHER
    return CPU if all(c in (CPU, OTHER) for c in classes) else UNKNOWN


class _Flow:
    """Which values are on the device: assignments followed in source order within a function
    (globals through the module), calls of local functions through their ``return``."""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self._bindings: dict[ast.AST, dict[str, list[_Binding]]] = {}
        self._moved: dict[ast.AST, set[str]] = {}
        self._backward: dict[ast.AST, set[str]] = {}
        self._busy: set[ast.AST] = set()
        self._memo: dict[ast.AST, str] = {}

    def _facts(self, scope: ast.AST) -> dict[str, list[_Binding]]:
        """The scope's bindings by name; also the names it moves (``x.to(device)``, ``batch["x"].cuda()``)
        and those it calls ``.backward()`` on (``loss``, ``scaler.scale(loss)``, ``(loss / k)``)."""
        if scope in self._bindings:
            return self._bindings[scope]
        bindings: dict[str, list[_Binding]] = {}
        moved: set[str] = set()
        backward: set[str] = set()

        def bind(target: ast.AST, owner: ast.stmt | ast.expr, value: ast.AST | None) -> None:
            if isinstance(target, (ast.Tuple, ast.List)):
                # a, b = x, y pairs up; a, b = f() binds each to the whole value.
                pairs = (
                    value.elts
                    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                    else None
                )
                for i, element in enumerate(target.elts):
                    bind(element, owner, pairs[i] if pairs is not None else value)
            elif isinstance(target, ast.Starred):
                bind(target.value, owner, value)
            elif isinstance(target, ast.Name):
                end = target if isinstance(owner, (ast.For, ast.AsyncFor)) else owner
                where = (end.end_lineno or 0, end.end_col_offset or 0)
                bindings.setdefault(target.id, []).append((where, owner, value))

        if isinstance(scope, (*FUNCTIONS, ast.Lambda)):
            start = (scope.lineno, scope.col_offset)
            arguments = scope.args
            for arg in (a for a in ast.walk(arguments) if isinstance(a, ast.arg)):
                bindings.setdefault(arg.arg, []).append((start, scope, None))
        for node in self.context.walk_scope(scope):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, node, node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                bind(node.target, node, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target, node, node.iter)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                if node.func.attr == "backward" and isinstance(receiver, ast.Call) and receiver.args:
                    receiver = receiver.args[0] if last_name(receiver.func) == "scale" else receiver
                while isinstance(receiver, (ast.BinOp, ast.Attribute, ast.Subscript)):
                    receiver = receiver.left if isinstance(receiver, ast.BinOp) else receiver.value
                if isinstance(receiver, ast.Name) and node.func.attr in ("to", "cuda", "backward"):
                    (backward if node.func.attr == "backward" else moved).add(receiver.id)
        self._bindings[scope], self._moved[scope], self._backward[scope] = bindings, moved, backward
        return bindings

    def of(self, expr: ast.AST, depth: int = 0) -> str:
        if expr in self._memo:
            return self._memo[expr]
        if depth > 20 or expr in self._busy:
            return UNKNOWN
        self._busy.add(expr)
        try:
            self._memo[expr] = result = self._of(expr, depth + 1)
        finally:
            self._busy.discard(expr)
        return result

    def _of(self, expr: ast.AST, depth: int) -> str:
        if isinstance(expr, (ast.Constant, ast.JoinedStr, ast.Lambda)):
            return OTHER
        if isinstance(expr, ast.Name):
            return self._name(expr, depth)
        if isinstance(expr, ast.Call):
            return self._call(expr, depth)
        if isinstance(expr, ast.Attribute):
            if _MODULE_NAME.search(expr.attr):
                return OBJECT
            inner = OTHER if expr.attr in _PLAIN_ATTRS else self.of(expr.value, depth)
            return inner if inner in (DEVICE, CPU, OTHER) else UNKNOWN
        if type(expr) not in _PARTS:
            return UNKNOWN
        fields = [getattr(expr, field) for field in _PARTS[type(expr)]]
        values = [v for f in fields for v in (f if isinstance(f, list) else [f]) if v is not None]
        return _combine([self.of(v, depth) for v in values]) if values else OTHER

    def _name(self, name: ast.Name, depth: int) -> str:
        if _MODULE_NAME.search(name.id):
            return OBJECT
        for ancestor in self.context.ancestors(name):
            if isinstance(ancestor, SCOPES):
                break
            for generator in getattr(ancestor, "generators", ()):  # [x.item() for x in outs]
                if name.id in bound_names(generator.target):
                    return self.of(generator.iter, depth)
        scope, here = self.context.scope_of(name), (name.lineno, name.col_offset)
        for where in (scope, self.context.tree):
            # In its own scope a name reads the last binding before it; a global, the last one.
            entries = [e for e in self._facts(where).get(name.id, []) if where is not scope or e[0] <= here]
            if entries:
                break
        else:
            return UNKNOWN
        _, owner, value = max(entries, key=lambda e: e[0])
        if isinstance(owner, (ast.For, ast.AsyncFor)) and name.id in self._moved[where]:
            return CPU  # a loop variable the loop moves with x.to(device): as bound, the host batch
        if value is None and isinstance(owner, FUNCTIONS) and self._lightning_batch(owner, name.id):
            return DEVICE
        result = UNKNOWN if value is None else self.of(value, depth)
        if isinstance(owner, ast.AugAssign) and result != DEVICE:
            result = _combine([result, self.of(owner.target, depth)])
        if result == UNKNOWN and (name.id in self._backward[where] or (value and _LOSS_NAME.search(name.id))):
            return DEVICE
        return result

    def _lightning_batch(self, function: ast.AST, name: str) -> bool:
        """Lightning moves the batch to the module's device before ``training_step`` sees it."""
        owner = self.context.parent(function)
        if getattr(function, "name", "") != "training_step" or not isinstance(owner, ast.ClassDef):
            return False
        if name in ("self", "batch_idx", "dataloader_idx", "optimizer_idx"):
            return False
        return any("LightningModule" in (self.context.qualname(base) or "") for base in owner.bases)

    def _call(self, call: ast.Call, depth: int) -> str:
        func, qualname = call.func, self.context.qualname(call.func) or ""
        method = func.attr if isinstance(func, ast.Attribute) else None
        if method in ("cpu", "numpy") or qualname.startswith("numpy."):
            return CPU
        if method in _PLAIN_METHODS or qualname in _PLAIN_BUILTINS:
            return OTHER
        receiver = self.of(func.value, depth) if isinstance(func, ast.Attribute) else UNKNOWN
        if receiver == OBJECT:  # model.parameters(), model.to(device), model.module(x)
            if _MODULE_NAME.search(method or ""):
                return DEVICE
            return OBJECT if method in ("to", "cuda", "cpu", "train", "eval", "float", "half") else UNKNOWN
        if method == "cuda" or qualname.endswith("clip_grad_norm_"):
            return DEVICE
        if method == "to":
            return _transfer_target(call) or receiver
        if (last_name(func) or "x")[0].isupper():
            return OBJECT  # Net(), nn.Linear(8, 2), torch.optim.Adam(...): an instance, not a tensor
        if qualname in _CONTAINERS:
            return _combine([self.of(a, depth) for a in call.args]) if call.args else OTHER
        if qualname.startswith("torch.") and qualname.rsplit(".", 1)[-1] in _FACTORIES:
            device = keyword(call, "device")
            return CPU if device is None or (string_value(device) or "").startswith("cpu") else DEVICE
        local = self.context.calls_local_function(call)
        if local:
            walk = self.context.walk_scope
            returns = [r.value for f in local for r in walk(f) if isinstance(r, ast.Return)]
            return _combine([self.of(r, depth) for r in returns if r is not None] or [OTHER])
        if _MODEL_CALLEE.search(last_name(func) or "") or self.of(func, depth) == OBJECT:
            return DEVICE  # model(x), self.head(h), criterion(out, y)
        if receiver in (DEVICE, CPU):
            return receiver  # x.argmax(1), x.detach(), x.float()
        arguments = [*call.args, *(k.value for k in call.keywords)]
        combined = _combine([self.of(a, depth) for a in arguments] or [UNKNOWN])
        return combined if combined in (DEVICE, CPU, OTHER) else UNKNOWN


def _transfer_target(call: ast.Call) -> str | None:
    """DEVICE or CPU for ``x.to(...)`` that names where; None for a dtype-only conversion."""
    target = keyword(call, "device") or (call.args[0] if call.args else None)
    if isinstance(target, ast.Call) and last_name(target.func) == "device":
        target = target.args[0] if target.args else None  # torch.device("cuda", 0)
        if string_value(target) is None:
            return DEVICE
    text = string_value(target)
    if text is not None:
        return CPU if text.startswith("cpu") else DEVICE
    name = last_name(target) or "" if target is not None else ""
    return DEVICE if _DEVICE_NAME.search(name) or name in ("rank", "local_rank") else None


def _syncs(flow: _Flow, call: ast.Call) -> str | None:
    """What in this call waits for the device, as the message names it."""
    func = call.func
    if isinstance(func, ast.Attribute) and not call.args and not call.keywords:
        where = flow.of(func.value)
        if func.attr == "item" and where not in (CPU, OTHER):
            return _short(call)
        if func.attr in ("cpu", "numpy", "tolist") and where == DEVICE:
            return _short(call)
        return None
    qualname = flow.context.qualname(func)
    if qualname in ("float", "int") and len(call.args) == 1 and flow.of(call.args[0]) == DEVICE:
        return _short(call)
    if qualname == "print":
        values = [a for a in call.args if not isinstance(a, ast.JoinedStr)]
        formatted = [v for a in call.args if isinstance(a, ast.JoinedStr) for v in a.values]
        values += [v.value for v in formatted if isinstance(v, ast.FormattedValue)]
        if any(flow.of(v) == DEVICE for v in values):
            return _short(call)
    return None


class _Environment:
    """What the module feeds to ``env.step(...)``, gathered once per module: the nodes inside its
    arguments, the names they read, and the functions whose result is bound to such a name."""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self.inside: set[ast.AST] = set()
        self.fed: set[str] = set()
        for step in context.nodes(ast.Call):
            func = step.func
            receiver = last_name(func.value) or "" if isinstance(func, ast.Attribute) else ""
            if isinstance(func, ast.Attribute) and func.attr == "step" and "env" in receiver.lower():
                for argument in [*step.args, *(k.value for k in step.keywords)]:
                    for node in ast.walk(argument):
                        self.inside.add(node)
                        if isinstance(node, ast.Name):
                            self.fed.add(node.id)
        self.fed_returns: set[str] = set()
        if self.fed:
            for assign in context.nodes(ast.Assign):
                if isinstance(assign.value, ast.Call) and self.fed & {
                    n for t in assign.targets for n in bound_names(t)
                }:
                    self.fed_returns.add(last_name(assign.value.func) or "")

    def feeds(self, call: ast.Call) -> bool:
        """``env.step(q(s).argmax().item())``: the host needs the value, there is nothing to defer.
        Followed through one assignment and through a function's ``return`` (``select_action()``)."""
        if call in self.inside:
            return True
        if not self.fed:
            return False
        statement = next(a for a in self.context.ancestors(call) if isinstance(a, ast.stmt))
        if isinstance(statement, ast.Assign):
            return bool(self.fed & {n for t in statement.targets for n in bound_names(t)})
        function = self.context.function_of(call)
        return (
            isinstance(statement, ast.Return) and function is not None and function.name in self.fed_returns
        )


def _may_sync(context: ModuleContext, call: ast.Call) -> bool:
    """The calls _syncs() can report, told by their shape alone: a cheap filter before dataflow."""
    func = call.func
    if isinstance(func, ast.Attribute) and not call.args and not call.keywords:
        return func.attr in ("item", "cpu", "numpy", "tolist")
    return context.qualname(func) in ("float", "int", "print")


def _short(call: ast.Call) -> str:
    """``loss.item()``; ``float(clip_grad_norm_(...))`` when the full text is long."""
    text = ast.unparse(call)
    if len(text) <= 48:
        return text
    if isinstance(call.func, ast.Name) and call.args and isinstance(call.args[0], ast.Call):
        return f"{call.func.id}({ast.unparse(call.args[0].func).rsplit('.', 1)[-1]}(...))"
    return "..." + text[-40:] if isinstance(call.func, ast.Attribute) else text[:45] + "..."


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    if not (context.step_loops or context.step_functions) or not _uses_gpu(context):
        return
    flow, environment, seen = _Flow(context), _Environment(context), set()
    for call in context.nodes(ast.Call):
        if call.lineno in seen or not _may_sync(context, call):
            continue
        if not context.runs_every_step(call):
            continue
        what = _syncs(flow, call)
        if what is None or environment.feeds(call):
            continue
        seen.add(call.lineno)
        yield (
            call,
            (
                f"{what} makes the host wait for the GPU on every training step{context.every_step_note(call)}; "
                "keep running sums on "
                "the device (total += loss.detach()) and read them every N steps"
            ),
        )


RULE = Rule(
    code="TM107",
    name="host-sync-per-step",
    summary=".item(), .cpu(), float(loss) or print(loss) of a GPU tensor on every training step.",
    why=(
        "CUDA runs asynchronously: the host queues kernels and moves on, so the next step's data\n"
        "loading and kernel launches overlap the current step's GPU work. Reading a value on the host\n"
        "(.item(), .cpu(), .numpy(), .tolist(), float(t), print(t)) blocks until every queued kernel\n"
        "has finished; done every step, the GPU idles while the host prepares the next step\n"
        "(`trainmedic run` reports that time as `sync`). On a CPU a sync is free, so only modules\n"
        "that use a GPU are checked."
    ),
    fix=(
        "Accumulate on the device (running += loss.detach(); correct += (pred == y).sum()) and read\n"
        "the totals every N steps (if step % log_every == 0) or once per epoch; torchmetrics keeps\n"
        "its state on the device the same way. `trainmedic lint --fix` puts a statement that only\n"
        "prints or logs the value under `if step % 100 == 0:` where the loop's step counter is in\n"
        "sight; a value kept or summed every step is left for you to move onto the device."
    ),
    before="""
device = torch.device("cuda")
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
""",
    after="""
device = torch.device("cuda")
running_loss = torch.zeros((), device=device)
for step, (x, y) in enumerate(loader):
    x, y = x.to(device), y.to(device)
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()
    if step % 100 == 0:
        print(f"loss {running_loss.item() / (step + 1):.4f}")
""",
    check=check,
    fixer=gate,
)
