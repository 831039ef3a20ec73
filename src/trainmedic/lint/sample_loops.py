"""Loops over samples: which loops and comprehensions iterate samples (not epochs, steps, layers,
batches, files or the items of data that exist already), what one iteration keeps (``append``,
``out[i] = ...``, ``yield``, a comprehension's element), and the expressions that make it. Shared
by TM113, which reports a loop that makes one sample per iteration on the GPU, and TM108, which
names that loop for a per-sample transfer.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence

from trainmedic.lint.context import LOOPS, SCOPES, ModuleContext
from trainmedic.lint.loop_closures import COMPREHENSIONS, RebindingLoop
from trainmedic.lint.syntax import bound_names, last_name, names_in, source_order, words_in

#: Wrappers whose items are the items of their arguments.
_WRAPPERS = frozenset("enumerate zip tqdm tqdm.tqdm tqdm.auto.tqdm list sorted reversed".split())
_RANGES = frozenset("range tqdm.trange tqdm.auto.trange".split())
#: Words of an iterable (or a while test) that say its items are not samples: one GPU, epoch,
#: step of an iterative method, layer, batch, chunk, file, field or class each.
_NOT_SAMPLES = re.compile(
    r"sizes|shapes|resolution|repeat|warm|^runs?$|^n_runs$|bench|timing|"
    r"epoch|step|iter|layer|block|head|stage|level|module|parameters|param_group|named_param|weight|buffer|grad|"
    r"model|net|optim|sched|device|gpu|cuda|rank|world|worker|thread|proc|node|loader|batches|"
    r"(n|num)_?batch|chunk|split|shard|file|path|dir|folder|url|glob|key|name|field|col|metric|loss|"
    r"config|cfg|trial|fold|experiment|checkpoint|ckpt|round|token|vocab|word|char|line|seq|"
    r"class|dim|channel|axis|feat|receiver|antenna|tap|delay|echo|harmonic",
    re.IGNORECASE,
)
#: Items of data that exist already (images, masks, a model's outputs, test cases, tensors):
#: a loop over them processes each, it does not make samples. A count (``range(n_images)``) may.
_DATA_ITEMS = re.compile(
    r"image|img|frame|mask|box|annotation|patch|crop|segment|prompt|caption|text|audio|video|output|"
    r"result|pred|logit|tensor|input|case|shape|dtype|type|mode|option|kind|variant|product|combin|"
    r"setting|spec|meta|placement|range|^ords?$|desc|flat|default|state|attr",
    re.IGNORECASE,
)
#: ...unless they also say samples: ``batch_params``, ``samples_per_epoch``, ``signal_configs``.
_SAMPLES = re.compile(r"sample|example|signal|emitter|batch_?param|record|row|item", re.IGNORECASE)
#: What a model's code keeps in lists: its parts, its losses and metrics, its hooks.
_MODEL_PARTS = re.compile(
    r"model|net|layer|module|block|head|param|weight|buffer|grad|optim|sched|loss|metric|hook|callback",
    re.IGNORECASE,
)
#: Dict views: the fields of one record, not samples.
_FIELD_VIEWS = frozenset("items keys values".split())
#: A literal count below this makes the parts of one sample (7 receivers, 3 echoes), not a dataset.
_MIN_LITERAL_COUNT = 32


class SampleLoop:
    """One candidate loop: what it iterates, the names that change per iteration, its body (a
    loop's statements, or a comprehension's element and conditions)."""

    def __init__(
        self,
        node: RebindingLoop,
        over: str,
        fresh: set[str],
        body: list[ast.stmt] | list[ast.expr],
        counters: set[str],
    ):
        self.node, self.over, self.fresh, self.body, self.counters = node, over, fresh, body, counters
        self._changing: frozenset[str] | None = None

    @property
    def changing(self) -> frozenset[str]:
        """The loop's variables and every name its body binds: what may differ per iteration."""
        if self._changing is None:
            self._changing = frozenset(self.fresh | _bound(self.body))
        return self._changing


def sample_loops(context: ModuleContext) -> Iterator[SampleLoop]:
    """Every loop and comprehension of the module over samples, in source order."""
    for node in context.nodes(*LOOPS, *COMPREHENSIONS):
        loop = sample_loop(context, node)
        if loop is not None:
            yield loop


def sample_loop(context: ModuleContext, node: ast.AST) -> SampleLoop | None:
    """The loop or comprehension as a loop over samples; None when its items are not samples."""
    if isinstance(node, COMPREHENSIONS):
        over = _per_sample_iterable(context, node.generators[0].iter)
        if over is None:
            return None
        fresh = set().union(*(bound_names(g.target) for g in node.generators))
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        ifs = [test for g in node.generators for test in g.ifs]
        return SampleLoop(node, f"the comprehension over `{over}`", fresh, [*elements, *ifs], set())
    if isinstance(node, ast.While):
        counters = _counters(node)
        if not counters or not _not_named_otherwise(list(words_in(node.test))):
            return None
        return SampleLoop(node, f"the `while {ast.unparse(node.test)}` loop", counters, node.body, counters)
    if isinstance(node, (ast.For, ast.AsyncFor)):
        over = _per_sample_iterable(context, node.iter)
        if over is None:
            return None
        return SampleLoop(node, f"the loop over `{over}`", bound_names(node.target), node.body, set())
    return None


def _per_sample_iterable(context: ModuleContext, iterable: ast.AST) -> str | None:
    """The iterable as written when its items may be samples: ``range(n)``, ``zip(freqs, snrs)``,
    ``enumerate(batch_params)``; None for epochs, steps, layers, batches, chunks, files, dict
    fields, a literal handful of items, or a range with a stride (chunks of a larger job)."""
    inner = iterable
    while isinstance(inner, ast.Call) and (context.qualname(inner.func) or "") in _WRAPPERS:
        if not inner.args:
            return None
        parts = [a for a in inner.args if not isinstance(a, ast.Starred)]
        if len(parts) != len(inner.args) or not all(_items_may_be_samples(context, p) for p in parts[1:]):
            return None
        inner = parts[0]
    return ast.unparse(iterable) if _items_may_be_samples(context, inner) else None


def _items_may_be_samples(context: ModuleContext, iterable: ast.AST) -> bool:
    if isinstance(iterable, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Constant, ast.JoinedStr)):
        return False
    if isinstance(iterable, ast.Call) and (context.qualname(iterable.func) or "") in _WRAPPERS:
        return _per_sample_iterable(context, iterable) is not None
    if isinstance(iterable, ast.Call) and (context.qualname(iterable.func) or "") in _RANGES:
        args = iterable.args
        if not args or len(args) > 3 or any(isinstance(a, ast.Starred) for a in args):
            return False
        if len(args) == 3 and not (isinstance(args[2], ast.Constant) and args[2].value in (1, -1)):
            return False  # range(0, n, 256): one chunk per iteration
        stop = args[1] if len(args) > 1 else args[0]
        if isinstance(stop, ast.Call) and context.qualname(stop.func) == "min":
            bounds = [a.value for a in stop.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
            if bounds and min(bounds) < _MIN_LITERAL_COUNT:
                return False  # range(min(3, m, n)): a handful
        if isinstance(stop, ast.Constant):
            return isinstance(stop.value, int) and stop.value >= _MIN_LITERAL_COUNT
        words = list(words_in(stop, strings=True))
        if not _not_named_otherwise(words):
            return False
        # A count (n_images, args.num_frames) may be samples to make; len(outputs) or
        # x.shape[0] counts the items of data that exist already.
        return isinstance(stop, (ast.Name, ast.Attribute)) or not any(_DATA_ITEMS.search(w) for w in words)
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
        if iterable.func.attr in _FIELD_VIEWS:
            return False
    words = list(words_in(iterable, strings=True))
    if not _not_named_otherwise(words) or any(_DATA_ITEMS.search(word) for word in words):
        return False
    if isinstance(iterable, ast.Subscript):
        return _items_may_be_samples(context, iterable.value)
    if isinstance(iterable, ast.Name) and _literal_collection(context, iterable):
        return False
    return True


def _not_named_otherwise(words: list[str]) -> bool:
    """No word names epochs, layers, files...; or one says samples anyway (``batch_params``)."""
    if any(_SAMPLES.search(word) for word in words):
        return True
    return not any(_NOT_SAMPLES.search(word) for word in words)


def _holds_samples(words: list[str]) -> bool:
    """A list or array that may hold samples: not a model's layers, parameters or losses."""
    if any(_SAMPLES.search(word) for word in words):
        return True
    return not any(_MODEL_PARTS.search(word) for word in words)


def _literal_collection(context: ModuleContext, name: ast.Name) -> bool:
    """``RECEIVERS = [(45.07, 7.68), ...]`` at module level or in the function: a fixed handful."""
    found = False
    for scope in {context.scope_of(name), context.tree}:
        for node in context.walk_scope(scope):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name.id for t in node.targets
            ):
                if not isinstance(node.value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
                    return False
                found = True
    return found


def _counters(loop: ast.While) -> set[str]:
    """``while i < num`` with ``i += 1`` in the body, or ``while len(samples) < n`` with
    ``samples.append(...)``: a loop counted in samples. Empty for ``while True`` and others."""
    test = loop.test
    if (
        not isinstance(test, ast.Compare)
        or len(test.ops) != 1
        or not isinstance(test.ops[0], (ast.Lt, ast.LtE))
    ):
        return set()
    left = test.left
    incremented = {
        node.target.id
        for node in _body_nodes(loop.body)
        if isinstance(node, ast.AugAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(node.op, ast.Add)
    }
    if isinstance(left, ast.Name) and left.id in incremented:
        return {left.id}
    if isinstance(left, ast.Call) and last_name(left.func) == "len" and len(left.args) == 1:
        grown = last_name(left.args[0])
        for node in _body_nodes(loop.body):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and last_name(node.func.value) == grown
            ):
                return {grown} if grown else set()
    return set()


def _body_nodes(body: Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Every node of the body, not those of functions, lambdas or classes defined in it."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def kept_values(context: ModuleContext, loop: SampleLoop) -> list[ast.expr]:
    """The values the loop keeps, one per iteration: ``samples.append(x)``, ``out[i] = x``,
    ``yield x``, a comprehension's element; only those in this loop's own iterations, and not
    those kept in a model's lists (``self.layers.append(...)``, ``nn.ModuleList([...])``)."""
    if isinstance(loop.node, COMPREHENSIONS):
        parent = context.parent(loop.node)
        holder = parent.targets if isinstance(parent, ast.Assign) else [parent]
        if isinstance(parent, ast.Call):
            holder = [parent.func]
        if not _holds_samples([w for h in holder if h is not None for w in path_words(h)]):
            return []
        # The element (a dict comprehension's key and value): the body without the conditions.
        return [loop.node.key, loop.node.value] if isinstance(loop.node, ast.DictComp) else [loop.node.elt]
    values: list[ast.expr] = []
    for node in _body_nodes(loop.body):
        if isinstance(node, ast.Expr):
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr == "append"
                and len(value.args) == 1
                and _innermost_loop(context, node) is loop.node
                and _holds_samples(path_words(value.func.value))
            ):
                values.append(value.args[0])
            elif (
                isinstance(value, ast.Yield)
                and value.value is not None
                and _innermost_loop(context, node) is loop.node
            ):
                values.append(value.value)
        elif isinstance(node, ast.Assign) and any(
            isinstance(e, ast.Subscript)
            for t in node.targets
            for e in (t.elts if isinstance(t, ast.Tuple) else [t])
        ):
            if _innermost_loop(context, node) is not loop.node:
                continue
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                # a[i], b[i] = x, y pairs up; in a[i], b[i] = f(i) each keeps the whole value.
                paired = (
                    node.value.elts
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else None
                )
                for k, element in enumerate(elements):
                    if (
                        isinstance(element, ast.Subscript)
                        and names_in(element.slice) & loop.changing
                        and _holds_samples(path_words(element.value))
                    ):
                        values.append(paired[k] if paired is not None else node.value)
    return values


def _innermost_loop(context: ModuleContext, node: ast.AST) -> ast.AST | None:
    return next(context.enclosing_loops(node), None)


def _bound(body: Sequence[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in _body_nodes(body):
        if isinstance(node, ast.Assign):
            names |= {n for t in node.targets for n in bound_names(t)}
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            names |= bound_names(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            names |= bound_names(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            names |= bound_names(node.optional_vars)
        elif isinstance(node, ast.NamedExpr):
            names |= bound_names(node.target)
    return names


def _bindings(body: Sequence[ast.AST]) -> dict[str, list[tuple[ast.AST, ast.AST | None]]]:
    """name → [(the binding statement, the value it binds from)] in the body, in source order."""
    found: dict[str, list[tuple[ast.AST, ast.AST | None]]] = {}
    for node in _body_nodes(body):
        pairs: list[tuple[set[str], ast.AST | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [({n for t in node.targets for n in bound_names(t)}, node.value)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            pairs = [(bound_names(node.target), node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            pairs = [(bound_names(node.target), node.iter)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs = [(bound_names(node.optional_vars), node.context_expr)]
        elif isinstance(node, ast.NamedExpr):
            pairs = [(bound_names(node.target), node.value)]
        for names, value in pairs:
            for name in names:
                found.setdefault(name, []).append((node, value))
    for bindings in found.values():
        bindings.sort(key=lambda pair: _position(pair[0]))
    return found


def making(loop: SampleLoop, values: list[ast.expr]) -> tuple[list[ast.AST], bool]:
    """The expressions that make the kept values in one iteration (the values and, through the
    names they read, what the body assigns those names), and whether one of them carries state
    from the previous iteration (``x = x + dt * v(x)``: an iterative method, not samples)."""
    bindings = _bindings(loop.body)
    exprs: list[ast.AST] = list(values)
    pending = [n for v in values for n in names_in(v)]
    seen: set[str] = set()
    carried = False
    while pending:
        name = pending.pop()
        if name in seen or name not in bindings or name in loop.counters:
            continue
        seen.add(name)
        first, value = bindings[name][0]
        if isinstance(first, ast.AugAssign) and not _counts(first):
            carried = True
        elif value is not None and name in names_in(value) and not isinstance(first, (ast.For, ast.AsyncFor)):
            carried = True
        elif _read_before(loop.body, name, first):
            carried = True
        for _, value in bindings[name]:
            if value is not None:
                exprs.append(value)
                pending.extend(names_in(value))
    return exprs, carried


def _counts(node: ast.AugAssign) -> bool:
    return isinstance(node.op, ast.Add) and isinstance(node.value, ast.Constant)


def _read_before(body: Sequence[ast.AST], name: str, first: ast.AST) -> bool:
    limit = _position(first)
    return any(
        isinstance(node, ast.Name)
        and node.id == name
        and isinstance(node.ctx, ast.Load)
        and _position(node) < limit
        for node in _body_nodes(body)
    )


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def calls_in(exprs: Iterable[ast.AST]) -> list[ast.Call]:
    """The calls in the expressions (not in functions or lambdas they define), in source order."""
    found = []
    for expr in exprs:
        for node in _body_nodes([expr]):
            if isinstance(node, ast.Call):
                found.append(node)
    return source_order(set(found))


def path_words(func: ast.AST) -> list[str]:
    """``self.model.generate`` → [generate, model, self]; ``model(x).argmax`` → [argmax, model]."""
    words = []
    while True:
        if isinstance(func, ast.Attribute):
            words.append(func.attr)
            func = func.value
        elif isinstance(func, ast.Call):
            func = func.func
        elif isinstance(func, ast.Subscript):
            func = func.value
        else:
            if isinstance(func, ast.Name):
                words.append(func.id)
            return words
