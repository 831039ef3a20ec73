"""How far the loops of a stuck run got, read from its live frames when its stack is dumped.

Where the last stack sample fell (``model.py:27 in forward``) does not say why a run of a few
steps never ended; the loop that is still iterating, and how far it got, does: iteration 812 of
5000, when the override that should have made it 5 missed. The injected sitecustomize calls
:func:`read_loops` from its SIGUSR2 handler with the main thread's live frames; for every frame
of the project it writes the ``for``/``while`` loops around the frame's line, each with its
counter and its total as far as they can be read. The parent (``frames.py``) picks the loop to
report and renders it; it also calls :func:`loops_around` for the loop's place alone, when no
Python-level dump came back (a run stuck in native code).

What a loop counts is read from its source: ``for it in range(a, b, s)`` (``trange``,
``tqdm(range(...))``, ``itertools.count``), ``for i, x in enumerate(xs)``, ``while it < n``, or a
``name += 1`` in the body with an ``if name >= n: break`` (nanoGPT's ``while True`` loop). Values
are then read without running any of the program's code: a frame's variables, dict and list
items (``dict.get``, so the config tracker counts no read and a ``defaultdict`` adds no key),
``__dict__`` entries of instances, classes and modules, and int arithmetic; never a property,
``__getattr__``, ``__len__`` or a call of the program's (a stuck program may hold a lock any of
them needs). What cannot be read that way is reported as not known, with its expression, and
the parent may still find the total on the command line.

Loaded by its path in the child, which must not import trainmedic: standard library only.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, replace

FORMAT = "trainmedic.loops/1"
#: Folders of installed code, never the user's (the parent decides finally, with UserFiles).
_SKIP_DIRS = frozenset({".venv", "venv", "site-packages", "dist-packages"})
#: Frames looked at per dump: a deep recursion must not make the dump itself slow.
MAX_FRAMES = 64
_RANGES = frozenset({"range", "trange"})  # tqdm's trange(n) counts like range(n)
_WRAPPERS = frozenset({"tqdm"})  # tqdm(iterable, ...) iterates its first argument
_SIZED = (list, tuple, dict, str, range, set, frozenset, bytes)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class LoopSite:
    """One loop around a line, and what its source says it counts."""

    line: int
    kind: str  # "for" | "while"
    #: What counts the iterations, as source (``it``, ``self.step``); None: nothing that can be read.
    counter: str | None = None
    #: range(start, stop, step) style: the iteration is (counter - start) // step, the total
    #: len(range(start, stop, step)); ``stop`` None: no total (itertools.count).
    start: ast.expr | None = None
    stop: ast.expr | None = None
    step: ast.expr | None = None
    #: The counter's limit (``while it < n``, ``if it >= n: break``); ``sized``: enumerate's
    #: iterable, whose len() is the total when it is a builtin container.
    bound: ast.expr | None = None
    sized: ast.expr | None = None
    #: The total as the user wrote it: 'range(cfg["max_iters"])', "max_iters".
    total_text: str = ""
    #: Why the loop has no counter, in words, when it has none.
    why: str = ""


def loops_around(path: str, line: int) -> list[LoopSite]:
    """The loops around ``line`` in its own function (or module) body, outermost first.

    A loop of an enclosing function does not count: a ``def`` inside a loop is not run by it.
    [] when the file cannot be read or parsed.
    """
    parsed = _parse(path)
    if parsed is None:
        return []
    tree, text = parsed
    scope: ast.AST = tree
    found = True
    while found:  # descend to the innermost function or class holding the line
        found = False
        for node in _walk_scope(scope):
            if isinstance(node, _SCOPES) and node.lineno <= line <= (node.end_lineno or node.lineno):
                scope, found = node, True
                break
    loops = [
        node
        for node in _walk_scope(scope)
        if isinstance(node, _LOOPS) and node.lineno <= line <= _body_end(node)
    ]
    return [_site(node, text) for node in sorted(loops, key=lambda n: n.lineno)]


def read_loops(frame, root: str) -> dict:
    """What a dump writes to ``loops.json``: the project's frames from ``frame`` outwards, each
    with its loops and their progress; ``frame`` is the one a signal handler was given."""
    frames: list[dict[str, object]] = []
    cache: dict = {}
    while frame is not None and len(frames) < MAX_FRAMES:
        path = os.path.abspath(frame.f_code.co_filename)
        name = frame.f_code.co_name
        # A comprehension's frame sits on its function's line: the function's frame tells it.
        if _project_file(path, root) and not (name.startswith("<") and name != "<module>"):
            sites = cache.get((path, frame.f_lineno))
            if sites is None:
                sites = cache[(path, frame.f_lineno)] = loops_around(path, frame.f_lineno)
            frames.append(
                {
                    "path": path,
                    "line": frame.f_lineno,
                    "function": name,
                    "loops": [progress(site, frame) for site in sites],
                }
            )
        frame = frame.f_back
    frames.reverse()  # outermost first, as the stack dumps are
    return {"format": FORMAT, "frames": frames}


def progress(site: LoopSite, frame) -> dict:
    """The loop's iteration and total as read from ``frame``, and why what is missing is."""
    out = {
        "line": site.line,
        "kind": site.kind,
        "counter": site.counter,
        "iteration": None,
        "total": None,
        "total_text": site.total_text,
        "total_key": key_of(site),
        "unknown": site.why,
    }
    if site.counter is None:
        return out
    reader = _Reader(frame)
    value = _as_int(reader.value(ast.parse(site.counter, mode="eval").body))
    if value is None:
        out["unknown"] = f"{site.counter} has no int value in the frame (the loop has not started?)"
        return out
    start = _as_int(reader.value(site.start)) if site.start is not None else 0
    step = _as_int(reader.value(site.step)) if site.step is not None else 1
    if start is None or not step:
        out["unknown"] = f"the start or step of {site.total_text or 'the range'} cannot be read"
        return out
    out["iteration"] = (value - start) // step
    total = None
    if site.stop is not None:
        stop = _as_int(reader.value(site.stop))
        total = len(range(start, stop, step)) if stop is not None else None
    elif site.bound is not None:
        total = _as_int(reader.value(site.bound))
    elif site.sized is not None:
        total = reader.length(site.sized)
    out["total"] = total
    if total is None:
        out["unknown"] = (
            f"{site.total_text} cannot be read without running the program's code"
            if site.total_text
            else "the loop has no total in its source"
        )
    return out


def key_of(site: LoopSite) -> str:
    """The name the total goes by (``max_iters`` of ``range(cfg.max_iters)``): an option of that
    name on the command line may say what the frame could not."""
    node = site.stop if site.stop is not None else site.bound if site.bound is not None else site.sized
    while node is not None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Subscript):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value
            return ""
        if isinstance(node, ast.Call) and node.args and _called(node) in {"int", "len"}:
            node = node.args[0]
            continue
        return ""
    return ""


# -- reading the source ----------------------------------------------------------------------

_parsed: dict[str, tuple[float, tuple[ast.Module, str] | None]] = {}


def _parse(path: str) -> tuple[ast.Module, str] | None:
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    cached = _parsed.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
        parsed = (ast.parse(text), text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        parsed = None
    _parsed[path] = (mtime, parsed)
    return parsed


def _walk_scope(scope: ast.AST):
    """Every node of ``scope``'s own body: nested functions and classes are yielded, not entered."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _body_end(loop: ast.For | ast.AsyncFor | ast.While) -> int:
    """The loop's last line of its body: its ``else:`` runs after the last iteration, not in one."""
    return max(loop.lineno, loop.body[-1].end_lineno or loop.body[-1].lineno)


def _site(loop, text: str) -> LoopSite:
    def source(node: ast.expr) -> str:
        return ast.get_source_segment(text, node) or ast.unparse(node)

    kind = "while" if isinstance(loop, ast.While) else "for"
    if kind == "for":
        iterable, target = _unwrapped(loop.iter), loop.target
        name = _called(iterable) if isinstance(iterable, ast.Call) else None
        call = iterable if isinstance(iterable, ast.Call) else None  # name is None unless it is a call
        if isinstance(target, ast.Name) and call and name in _RANGES and 1 <= len(call.args) <= 3:
            args = call.args
            start, stop = (None, args[0]) if len(args) == 1 else (args[0], args[1])
            step = args[2] if len(args) == 3 else None
            return LoopSite(loop.lineno, kind, target.id, start, stop, step, total_text=source(loop.iter))
        if isinstance(target, ast.Name) and call and name == "count" and len(call.args) <= 2:
            start = call.args[0] if call.args else None
            step = call.args[1] if len(call.args) > 1 else None
            return _with_break(loop, LoopSite(loop.lineno, kind, target.id, start, step=step), source)
        if (
            call
            and name == "enumerate"
            and isinstance(target, ast.Tuple)
            and target.elts
            and isinstance(target.elts[0], ast.Name)
            and call.args
        ):
            start = call.args[1] if len(call.args) > 1 else None
            start = next((k.value for k in call.keywords if k.arg == "start"), start)
            inner = _unwrapped(call.args[0])
            site = LoopSite(
                loop.lineno, kind, target.elts[0].id, start, sized=inner, total_text=f"len({source(inner)})"
            )
            return _with_break(loop, site, source)
    else:
        found = _compared(loop.test, {ast.Lt, ast.LtE, ast.NotEq}, {ast.Gt, ast.GtE, ast.NotEq})
        if found is not None:
            counter, bound = found
            return LoopSite(loop.lineno, kind, counter, bound=bound, total_text=source(bound))
    counted = _with_break(loop, LoopSite(loop.lineno, kind), source)
    if counted.counter is None:
        head = source(loop.iter) if kind == "for" else source(loop.test)
        return replace(counted, why=f"`{head}` gives no count and the body adds to no counter")
    return counted


def _unwrapped(node: ast.expr) -> ast.expr:
    """``tqdm(loader, desc=...)`` iterates ``loader``."""
    while isinstance(node, ast.Call) and _called(node) in _WRAPPERS and node.args:
        node = node.args[0]
    return node


def _with_break(loop, site: LoopSite, source) -> LoopSite:
    """``site`` with the limit of an ``if counter >= n: break`` in the loop's body, and, when it
    has no counter of its own, the ``counter += 1`` of the body (the one tested, if any)."""
    counters: list[str] = []
    limits: dict[str, ast.expr] = {}
    equal: dict[str, ast.expr] = {}
    for node in _walk_body(loop):
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, ast.Add)
            and _countable(node.target)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            counters.append(ast.unparse(node.target))
        elif isinstance(node, ast.If) and any(isinstance(s, (ast.Break, ast.Return)) for s in node.body):
            # The limit is what the counter passes (>, >=); an == is a limit only when there is
            # no other (an `if it == 812: break` may be a test's probe, not the loop's end).
            found = _compared(node.test, {ast.Gt, ast.GtE}, {ast.Lt, ast.LtE})
            if found is not None:
                limits.setdefault(found[0], found[1])
            found = _compared(node.test, {ast.Eq}, {ast.Eq})
            if found is not None:
                equal.setdefault(found[0], found[1])
    limits = {**equal, **limits}
    counter = site.counter
    if counter is None:
        tested = [c for c in counters if c in limits]
        counter = next(iter(tested or counters), None)
    if counter is None:
        return site
    bound = limits.get(counter)
    if bound is None:
        return replace(site, counter=counter)
    return replace(site, counter=counter, stop=None, sized=None, bound=bound, total_text=source(bound))


def _walk_body(loop):
    """The loop's own body in source order: not nested loops' bodies (their counters are
    theirs) nor functions."""
    todo = list(reversed(loop.body))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*_SCOPES, *_LOOPS)):
            todo.extend(reversed(list(ast.iter_child_nodes(node))))


def _compared(test: ast.expr, left_ops: set, right_ops: set) -> tuple[str, ast.expr] | None:
    """(counter, limit) of ``counter <op> limit`` (an op of ``left_ops``) or ``limit <op> counter``
    (``right_ops``), also as one side of an ``or``/``and``; the counter as its source text."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            found = _compared(value, left_ops, right_ops)
            if found is not None:
                return found
        return None
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, op, right = test.left, type(test.ops[0]), test.comparators[0]
    if _countable(left) and op in left_ops:
        return ast.unparse(left), right
    if _countable(right) and op in right_ops:
        return ast.unparse(right), left
    return None


def _countable(node: ast.expr) -> bool:
    """A name or a chain of attributes (``step``, ``self.state.step``): what can hold a count."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _project_file(path: str, root: str) -> bool:
    root = os.path.abspath(root)
    if not path.startswith(root.rstrip(os.sep) + os.sep):
        return False
    return not _SKIP_DIRS.intersection(path[len(root) :].split(os.sep))


# -- reading the values ----------------------------------------------------------------------

_UNKNOWN = object()


class _Reader:
    """Values of expressions in one frame, read without running the program's code."""

    def __init__(self, frame) -> None:
        self.frame = frame
        self._locals = None

    def _scopes(self):
        if self._locals is None:
            self._locals = self.frame.f_locals  # a module's frame: its globals
        return (self._locals, self.frame.f_globals)

    def value(self, node: ast.expr | None):
        if node is None:
            return _UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value if type(node.value) in (int, float, str) else _UNKNOWN
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Attribute):
            return _attribute(self.value(node.value), node.attr)
        if isinstance(node, ast.Subscript):
            return _item(self.value(node.value), self.value(node.slice))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            number = self.value(node.operand)
            return -number if type(number) in (int, float) else _UNKNOWN
        if isinstance(node, ast.BinOp):
            return _arithmetic(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Call):
            return self._call(node)
        return _UNKNOWN

    def length(self, node: ast.expr):
        container = self.value(node)
        for kind in _SIZED:
            if isinstance(container, kind):
                # The builtin's own, not a subclass's override. (mypy does not tie ``kind`` to the
                # isinstance test above, so it checks ``container`` against every kind's __len__.)
                return kind.__len__(container)  # type: ignore[arg-type]
        return None

    def _name(self, name: str):
        for scope in self._scopes():
            try:
                return scope[name]
            except KeyError:
                continue
            except Exception:  # a proxy of a frame that is going away
                return _UNKNOWN
        return _UNKNOWN

    def _call(self, node: ast.Call):
        func = node.func
        if node.keywords:
            return _UNKNOWN
        if isinstance(func, ast.Attribute) and func.attr == "get" and 1 <= len(node.args) <= 2:
            mapping = self.value(func.value)
            if not isinstance(mapping, dict):
                return _UNKNOWN
            default = self.value(node.args[1]) if len(node.args) == 2 else None
            return _item(mapping, self.value(node.args[0]), default)
        if not isinstance(func, ast.Name) or self._name(func.id) is not _UNKNOWN:
            return _UNKNOWN  # not a builtin, or one the program shadowed
        args = [self.value(a) for a in node.args]
        if any(a is _UNKNOWN for a in args):
            return _UNKNOWN
        if func.id == "len" and len(node.args) == 1:
            length = self.length(node.args[0])
            return _UNKNOWN if length is None else length
        if func.id == "int" and len(args) == 1 and type(args[0]) in (int, float, str):
            try:
                return int(args[0])
            except ValueError:
                return _UNKNOWN
        if func.id in ("min", "max") and len(args) >= 2 and all(type(a) in (int, float) for a in args):
            return min(args) if func.id == "min" else max(args)
        return _UNKNOWN


def _attribute(base, name: str):
    if base is _UNKNOWN:
        return _UNKNOWN
    try:
        own = object.__getattribute__(base, "__dict__")  # not base.__dict__: no __getattribute__ of theirs
    except Exception:
        own = None
    if own is not None:
        try:
            return own[name]
        except Exception:
            pass
    if isinstance(base, type):
        return _UNKNOWN
    # A class attribute read through an instance (a config class's defaults); a descriptor
    # (property, method) would run code: not read.
    for klass in type(base).__mro__:
        found = klass.__dict__.get(name, _UNKNOWN)
        if found is not _UNKNOWN:
            return found if type(found) in (int, float, str, dict, list, tuple) else _UNKNOWN
    return _UNKNOWN


def _item(base, key, default=_UNKNOWN):
    if base is _UNKNOWN or key is _UNKNOWN:
        return _UNKNOWN
    if isinstance(base, dict) and type(key) in (int, str):
        return dict.get(base, key, default)  # no __missing__, no tracked read
    if isinstance(base, (list, tuple)) and type(key) is int:
        try:
            return list.__getitem__(base, key) if isinstance(base, list) else tuple.__getitem__(base, key)
        except IndexError:
            return _UNKNOWN
    return _UNKNOWN


def _arithmetic(op: ast.operator, left, right):
    if type(left) not in (int, float) or type(right) not in (int, float):
        return _UNKNOWN
    try:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.FloorDiv):
            return left // right
        if isinstance(op, ast.Div):
            return left / right
    except ZeroDivisionError:
        pass
    return _UNKNOWN


def _as_int(value) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None
