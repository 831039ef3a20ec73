"""Which calls open a file or a database connection, and where such an open runs again and again:
for every sample (a Dataset's ``__getitem__`` and the methods it calls), every training step, or
every batch a generator yields. What TM105 reports, and what its fixer needs to know of the same
open."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import FUNCTIONS, STEP_FUNCTION_NAMES, Function, ModuleContext
from trainmedic.lint.syntax import argument, last_name, names_in, string_value

#: Calls that open a file, with the keyword name of their path argument (always the first).
_FILE_OPENERS = {
    "h5py.File": "name",
    "zarr.open": "store",
    "zarr.open_group": "store",
    "zarr.open_array": "store",
    "zarr.open_consolidated": "store",
    "numpy.load": "file",
    "open": "file",
    "io.open": "file",
    "torch.load": "f",
    "lmdb.open": "path",
}
_CONNECTORS = frozenset(
    {
        "sqlite3.connect",
        "psycopg2.connect",
        "psycopg.connect",
        "pymysql.connect",
        "mysql.connector.connect",
        "duckdb.connect",
        "sqlalchemy.create_engine",
        "sqlalchemy.orm.Session",
        "sqlalchemy.orm.session.Session",
    }
)
_SESSION_FACTORIES = frozenset({"sqlalchemy.orm.sessionmaker", "sqlalchemy.orm.scoped_session"})
#: Calls that build a path from their arguments and nothing else: the same inputs, the same path.
_PATH_BUILDERS = frozenset(
    {
        "os.path.join",
        "os.path.expanduser",
        "os.path.abspath",
        "os.path.realpath",
        "os.fspath",
        "str",
        "pathlib.Path",
        "Path",
        "format",
        "joinpath",
        "with_suffix",
        "expanduser",
        "resolve",
    }
)
_DATASET_BASES = ("Dataset", "Sequence", "PyDataset")


def opened(context: ModuleContext, call: ast.Call, factories: set[str]) -> tuple[str, ast.AST | None] | None:
    """("h5py.File", path expression) for a file opened for reading; ("psycopg2.connect", None)
    for a database connection or session; None for anything else."""
    qualname = context.qualname(call.func) or ""
    if qualname in _CONNECTORS or (qualname.startswith("pymongo") and qualname.endswith("MongoClient")):
        return ast.unparse(call.func), None
    func = call.func
    if isinstance(func, ast.Call) and context.qualname(func.func) in _SESSION_FACTORIES:
        return ast.unparse(func.func) + "(...)", None
    if isinstance(func, (ast.Name, ast.Attribute)) and ast.unparse(func) in factories:
        return ast.unparse(func), None
    pandas_key = "filepath_or_buffer" if qualname.startswith("pandas.read_") else None
    key = _FILE_OPENERS.get(qualname) or pandas_key
    if key is None or (path := argument(call, 0, key)) is None:
        return None
    has_mode = qualname in ("open", "io.open", "h5py.File") or "zarr" in qualname
    given = argument(call, 1, "mode") if has_mode else None
    if given is not None and ((mode := string_value(given)) is None or any(c in mode for c in "wax+")):
        return None  # a write (a log, a cache being built) or a mode we cannot read
    if qualname == "numpy.load" and argument(call, 1, "mmap_mode") is not None:
        return None  # a memory map: opening it maps pages, it reads nothing
    return ast.unparse(func), path


def session_factories(context: ModuleContext) -> set[str]:
    """Names and ``self.attrs`` bound to ``sessionmaker(...)``: calling one opens a session."""
    found: set[str] = set()
    for assign in context.nodes(ast.Assign):
        if isinstance(assign.value, ast.Call) and context.qualname(assign.value.func) in _SESSION_FACTORIES:
            found.update(ast.unparse(t) for t in assign.targets if isinstance(t, (ast.Name, ast.Attribute)))
    return found


def getitem_reach(memo: ScopeMemo, cls: ast.ClassDef) -> dict[Function, ast.Call | None]:
    """A Dataset's ``__getitem__`` and the methods it calls on ``self`` (transitively, unless
    behind a lazy guard), each mapped to the call that reaches it (None for ``__getitem__``)."""
    methods = {f.name: f for f in cls.body if isinstance(f, FUNCTIONS)}
    bases = [last_name(b) or "" for b in cls.bases]
    is_dataset = any(b.endswith(_DATASET_BASES) for b in bases) or (
        "Dataset" in cls.name and "__len__" in methods
    )
    if "__getitem__" not in methods or not is_dataset:
        return {}
    reach: dict[Function, ast.Call | None] = {methods["__getitem__"]: None}
    queue = [methods["__getitem__"]]
    while queue:
        method = queue.pop()
        for node in memo.region(method):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and (callee := methods.get(node.func.attr)) is not None
                and callee not in reach
                and not _lazily_guarded(memo, node, method)
                and not any("cache" in ast.unparse(d) for d in callee.decorator_list)
            ):
                reach[callee] = node
                queue.append(callee)
    return reach


_BINDINGS = (
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.NamedExpr,
    ast.For,
    ast.AsyncFor,
    ast.comprehension,
)


def _varying(context: ModuleContext, region: tuple[ast.AST, ...], seeds: set[str]) -> set[str]:
    """Names that may differ between two runs of ``region``: the seeds (the sample index, the
    loop variables) and what is assigned from them or from a call we cannot see through."""
    readers: dict[str, list[set[str]]] = {}
    pending = list(seeds)
    for node in region:
        if not isinstance(node, _BINDINGS):
            continue
        value = node.iter if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) else node.value
        if value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if _opaque(context, value):
            pending.extend(bound)
        else:
            for name in names_in(value):
                readers.setdefault(name, []).append(bound)
    # Spread from the seeds along "read by": linear, where re-scanning every binding until nothing
    # changes is quadratic on a long chain (v1 = f(v0); v2 = f(v1); ...).
    varying: set[str] = set()
    while pending:
        name = pending.pop()
        if name not in varying:
            varying.add(name)
            pending.extend(n for bound in readers.get(name, ()) for n in bound if n not in varying)
    return varying


class ScopeMemo:
    """What many opens in one module ask about the same scope or loop, computed once per check() or fix()."""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self._varying: dict[tuple[ast.AST, frozenset[str]], set[str]] = {}
        self._handles: dict[ast.AST, set[str]] = {}
        self._exits: dict[ast.AST, set[str]] = {}
        self._repeated: dict[ast.AST, bool] = {}
        self._yielding: dict[ast.AST, set[ast.AST | None]] = {}

    def region(self, owner: ast.AST) -> tuple[ast.AST, ...]:
        return self.context.walk_scope(owner)  # cached by the context

    def varying(self, owner: ast.AST, seeds: set[str]) -> set[str]:
        key = (owner, frozenset(seeds))
        if key not in self._varying:
            self._varying[key] = _varying(self.context, self.region(owner), seeds)
        return self._varying[key]

    def handles(self, scope: ast.AST) -> set[str]:
        """Names bound by ``with ... as f`` in the scope: file objects, not paths."""
        if scope not in self._handles:
            self._handles[scope] = {
                n.id
                for node in self.region(scope)
                if isinstance(node, ast.withitem) and node.optional_vars
                for n in ast.walk(node.optional_vars)
                if isinstance(n, ast.Name)
            }
        return self._handles[scope]

    def early_exits(self, function: ast.AST) -> set[str]:
        """What the tests of ``if ...: return`` / ``raise`` blocks in the function mention."""
        if function not in self._exits:
            self._exits[function] = {
                ast.unparse(n)
                for node in self.region(function)
                if isinstance(node, ast.If) and isinstance(node.body[-1], (ast.Return, ast.Raise))
                for n in ast.walk(node.test)
            }
        return self._exits[function]

    def repeated(self, function: Function) -> bool:
        if function not in self._repeated:
            self._repeated[function] = _repeated(self.context, function)
        return self._repeated[function]

    def yielding(self, function: ast.AST) -> set[ast.AST | None]:
        """The innermost loop of each ``yield`` in a generator."""
        if function not in self._yielding:
            self._yielding[function] = {
                next(self.context.enclosing_loops(node), None)
                for node in self.region(function)
                if isinstance(node, (ast.Yield, ast.YieldFrom))
            }
        return self._yielding[function]


def same_file(memo: ScopeMemo, call: ast.Call, path: ast.AST, varying: set[str]) -> bool:
    """The path names one fixed file: no varying name, no opaque call, and not a file object
    or temporary name bound by ``with`` (``torch.load(f)`` of an open buffer opens nothing)."""
    names = names_in(path)
    if names & varying or _opaque(memo.context, path):
        return False
    return not names & memo.handles(memo.context.scope_of(call))


def _opaque(context: ModuleContext, expr: ast.AST) -> bool:
    """An expression whose value we cannot call fixed: a call other than a path builder, or a
    subscript with a computed index (``self.files[self.cursor]``)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            qualname = context.qualname(node.func) or ""
            if qualname not in _PATH_BUILDERS and last_name(node.func) not in _PATH_BUILDERS:
                return True
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            return True
    return False


def _lazily_guarded(memo: ScopeMemo, call: ast.AST, stop: ast.AST) -> bool:
    """``if self.f is None: self.f = ...``, ``if not hasattr(self, "db"): ...``, ``self.conn or
    connect()``, an ``except`` that reconnects: opened once and kept, not every time."""
    context = memo.context
    for ancestor in context.ancestors(call):
        if ancestor is stop or isinstance(ancestor, FUNCTIONS):
            break
        if isinstance(ancestor, (ast.BoolOp, ast.ExceptHandler)):
            return True
        if isinstance(ancestor, ast.IfExp) and "None" in ast.unparse(ancestor.test):
            return True  # self.h5 = self.h5 if self.h5 is not None else h5py.File(...)
        if isinstance(ancestor, ast.If) and _checks_what_it_sets(ancestor):
            return True
    # ``if self.h5 is not None: return`` earlier in the function, then ``self.h5 = h5py.File(...)``.
    stored = context.parent(call)
    function = context.function_of(call)
    if not isinstance(stored, ast.Assign) or function is None:
        return False
    return any(ast.unparse(t) in memo.early_exits(function) for t in stored.targets)


def _checks_what_it_sets(branch: ast.If) -> bool:
    """The ``if`` tests something (``is None``, ``not``, ``in``, ``hasattr``) that its body sets."""
    test = branch.test
    if not any(
        isinstance(n, ast.UnaryOp)
        and isinstance(n.op, ast.Not)
        or isinstance(n, ast.Compare)
        and any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in n.ops)
        or isinstance(n, ast.Call)
        and last_name(n.func) in ("hasattr", "getattr")
        for n in ast.walk(test)
    ):
        return False
    nodes = list(ast.walk(test))
    mentioned = {ast.unparse(n) for n in nodes if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript))}
    mentioned |= {f"self.{n.value}" for n in nodes if isinstance(n, ast.Constant) and type(n.value) is str}
    for node in ast.walk(branch):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if any(t is not None and ast.unparse(t) in mentioned for t in targets):
                return True
            # ``if key not in self.cache: self.cache[key] = ...``
            if any(isinstance(t, ast.Subscript) and ast.unparse(t.value) in mentioned for t in targets):
                return True
    return False


def _parameters(function: Function) -> set[str]:
    args = function.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg not in ("self", "cls")}


def per_batch(memo: ScopeMemo, call: ast.Call) -> tuple[ast.AST, str] | None:
    """The training loop or step function that runs ``call`` every step, or the loop of a batch
    generator (a loop that yields) that runs it for every batch; with words for the message."""
    context = memo.context
    step = context.step_context(call)
    if step is not None:
        if context.is_rate_limited(call) or (isinstance(step, FUNCTIONS) and not memo.repeated(step)):
            return None
        return step, f"every training step{context.every_step_note(call)}"
    function = context.scope_of(call)
    if not isinstance(function, FUNCTIONS):
        return None
    # A loop that yields once per pass; ``while True: open(...); for i in ...: yield`` opens once per epoch.
    yielding = memo.yielding(function)
    loop = next((loop for loop in context.enclosing_loops(call) if loop in yielding), None)
    return (loop, f"every batch the generator {function.name}() yields") if loop is not None else None


def _repeated(context: ModuleContext, function: Function) -> bool:
    """A step function that surely runs many times: a framework's ``training_step``, or one
    called from a loop (a test or a smoke run that does one backward pass is not)."""
    if function.name in STEP_FUNCTION_NAMES or function in context.per_step_callers:
        return True
    return any(next(context.enclosing_loops(call), None) is not None for call in context.callers(function))


def findings(memo: ScopeMemo, factories: set[str]) -> Iterator[tuple[ast.Call, str, str, set[str]]]:
    """(call, what it opens, when it runs, names that vary between two runs) for every open
    that runs once per sample (``__getitem__``), per training step, or per generated batch."""
    context, seen = memo.context, set()
    for cls in context.nodes(ast.ClassDef):
        for method, via in getitem_reach(memo, cls).items():
            varying = memo.varying(method, _parameters(method))
            how = f" (through self.{method.name}() at line {via.lineno})" if via is not None else ""
            for call in (n for n in memo.region(method) if isinstance(n, ast.Call)):
                if opened(context, call, factories) and not _lazily_guarded(memo, call, method):
                    seen.add(call)
                    yield call, "", f"every {cls.name}.__getitem__ call{how}", varying
    for call in context.nodes(ast.Call):
        found = per_batch(memo, call) if call not in seen and opened(context, call, factories) else None
        if found is None or _lazily_guarded(memo, call, found[0]):
            continue
        step, when = found
        if isinstance(step, FUNCTIONS):
            seeds = _parameters(step)
        else:
            loops = [loop for loop in context.enclosing_loops(call) if not isinstance(loop, ast.While)]
            seeds = {n.id for loop in loops for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        yield call, "before the loop", when, memo.varying(step, seeds)
