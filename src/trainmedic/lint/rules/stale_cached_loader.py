"""TM109: a DataLoader built lazily and cached, with a cache check that ignores an argument it was built with."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import last_name, names_in

_LOADER_WORDS = re.compile(r"loader", re.IGNORECASE)
#: Keywords that say a call builds batches, when its name alone ("get_loader") is not enough.
_LOADER_KEYWORDS = frozenset({"batch_size", "shuffle", "num_workers", "drop_last", "collate_fn", "sampler"})
#: Loaders that are not data loaders (templates, YAML, import machinery).
_OTHER_LOADERS = ("jinja2.", "yaml.", "importlib.", "pkgutil.", "django.")


def _builds_loader(context: ModuleContext, call: ast.Call) -> bool:
    """``DataLoader(...)``, ``get_image_dataloader(...)``, ``make_loader(..., batch_size=n)``,
    and ``iter()`` of any of them."""
    qualname = context.qualname(call.func) or ""
    if qualname == "iter" and call.args and isinstance(call.args[0], ast.Call):
        return _builds_loader(context, call.args[0])
    name = last_name(call.func) or ""
    if not _LOADER_WORDS.search(name) or qualname.startswith(_OTHER_LOADERS):
        return False
    # ``get_train_loader(split)`` is a factory; a class such as ``FileSystemLoader`` must show batches.
    return (
        "dataloader" in name.lower()
        or name[0].islower()
        or any(k.arg in _LOADER_KEYWORDS for k in call.keywords)
    )


def _cache_slot(test: ast.expr) -> tuple[str, ast.AST | None, bool] | None:
    """(slot, key, missing) for a cache check. ``if not hasattr(self, "_loader")``, ``if
    self._loader is None``, ``if not self._loader``: ("self._loader", None, True); ``if key not in
    self._cache``: ("self._cache", key, True); ``if key in self._cache`` (then return it):
    ("self._cache", key, False)."""
    if isinstance(test, ast.BoolOp):
        for part in test.values:
            found = _cache_slot(part)
            # ``missing or changed`` builds, ``present and unchanged`` returns.
            if found is not None and found[2] == isinstance(test.op, ast.Or):
                return found
        return None
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if negated else test  # type: ignore[attr-defined]
    if isinstance(inner, ast.Call) and last_name(inner.func) == "hasattr" and len(inner.args) == 2:
        attr = inner.args[1]
        if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
            return f"{ast.unparse(inner.args[0])}.{attr.value}", None, negated
    if isinstance(inner, (ast.Name, ast.Attribute)):
        return ast.unparse(inner), None, negated
    if isinstance(inner, ast.Compare) and len(inner.ops) == 1 and not negated:
        op, right = inner.ops[0], inner.comparators[0]
        is_none = (
            isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None
        )
        if is_none and isinstance(inner.left, (ast.Name, ast.Attribute)):
            return ast.unparse(inner.left), None, isinstance(op, ast.Is)
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Name, ast.Attribute)):
            return ast.unparse(right), inner.left, isinstance(op, ast.NotIn)
    return None


def _build_statements(context: ModuleContext, branch: ast.If, missing: bool) -> list[ast.stmt]:
    """Where the loader is built: the ``if`` body, or after an ``if`` that returns the cached one."""
    if missing:
        return branch.body
    if branch.orelse or not isinstance(branch.body[-1], ast.Return):
        return []
    parent = context.parent(branch)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(stmt is branch for stmt in block):
            return block[[id(stmt) for stmt in block].index(id(branch)) + 1 :]
    return []


def _derived(function: ast.AST, context: ModuleContext) -> dict[str, set[str]]:
    """Each local name → the parameters its value comes from (``bs = n * 2`` → {"n"})."""
    args = function.args  # type: ignore[attr-defined]
    params = [
        a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg not in ("self", "cls")
    ]
    origin: dict[str, set[str]] = {p: {p} for p in params}
    assigns = [
        n for n in context.walk_scope(function) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
    ]
    grew = True
    while grew:
        grew = False
        for node in assigns:
            if node.value is None:
                continue
            sources = set().union(*(origin.get(n, set()) for n in names_in(node.value)))
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name) and not sources <= origin.setdefault(target.id, set()):
                    origin[target.id] |= sources
                    grew = True
    return origin


def _params_of(expr: ast.AST, origin: dict[str, set[str]]) -> set[str]:
    return set().union(*(origin.get(n, set()) for n in names_in(expr)))


def _built(context: ModuleContext, statements: list[ast.stmt], slot: str) -> Iterator[ast.Call]:
    """The loader-building calls these statements store in the checked slot."""
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        for target in node.targets:
            stored = ast.unparse(target.value if isinstance(target, ast.Subscript) else target)
            if stored == slot and _builds_loader(context, node.value):
                yield node.value


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for branch in context.nodes(ast.If):
        function = context.function_of(branch)
        if function is None or function.name == "__init__" or context.scope_of(branch) is not function:
            continue
        found = _cache_slot(branch.test)
        if found is None:
            continue
        slot, key, missing = found
        built = list(_built(context, _build_statements(context, branch, missing), slot))
        origin = _derived(function, context) if built else {}
        # The cached name itself is assigned from the arguments; testing it checks nothing about them.
        checked = set().union(*(origin.get(n, set()) for n in names_in(branch.test) - {slot}))
        for call in built:
            used = _params_of(call, origin) - checked
            if key is not None:
                used -= _params_of(key, origin)
            if not used:
                continue
            names = ", ".join(sorted(used))
            it = "it" if len(used) == 1 else "them"
            yield (
                call,
                (
                    f"{ast.unparse(call.func)}() is built with {names} and cached in {slot}, but the check "
                    f"`if {ast.unparse(branch.test)}` ignores {names}: a later call with a different {names} gets "
                    f"the old loader; remember {it} and rebuild on a change, or key the cache on {it}"
                ),
            )


RULE = Rule(
    code="TM109",
    name="stale-cached-loader",
    summary="A lazily built, cached DataLoader whose cache check omits an argument it was built with.",
    why=(
        "A loader built on first use and kept keeps the batch size (or split, or dataset) of that\n"
        "first call. A `sample_target(n)` that caches a DataLoader built with batch_size=n, asked\n"
        "for 256 in phase 1 and for 128 in phase 2, still hands out 256 and crashes with a shape error\n"
        "(`The size of tensor a (128) must match the size of tensor b (256)`) that looked like a\n"
        "model bug, not a caching one. When shapes happen to broadcast it trains silently wrong."
    ),
    fix=(
        "Make every argument the loader is built from part of the check: remember it and rebuild\n"
        "when it changes (`if self._loader is None or self._batch_size != n:`), key the cache on it\n"
        "(`key = (split, batch_size)`), or build one loader per phase where the phase starts."
    ),
    before="""
from torch.utils.data import DataLoader

class Targets:
    def sample_target(self, n, device="cpu"):
        if not hasattr(self, "_loader"):
            self._loader = DataLoader(self.dataset, batch_size=n, shuffle=True, drop_last=True)
            self._iter = iter(self._loader)
        return next(self._iter)[0].to(device)
""",
    after="""
from torch.utils.data import DataLoader

class Targets:
    def sample_target(self, n, device="cpu"):
        if not hasattr(self, "_loader") or self._batch_size != n:
            self._batch_size = n
            self._loader = DataLoader(self.dataset, batch_size=n, shuffle=True, drop_last=True)
            self._iter = iter(self._loader)
        return next(self._iter)[0].to(device)
""",
    check=check,
    not_fixable=(
        "which arguments belong in the cache's key is a design choice (key the cache on them, or build the loader each time); make it by hand"
    ),
)
