"""TM210: ``torch.log(torch.sum(torch.exp(x), dim))``, which overflows where torch.logsumexp does not."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import ensure_import, replace_node, text_of
from trainmedic.lint.model import Fix, Rule
from trainmedic.lint.syntax import keyword


@dataclass(frozen=True)
class LogSumExp:
    """The parts of a ``log(sum(exp(x), dim, keepdim))`` chain, as written."""

    x: ast.expr
    dim: ast.expr
    keepdim: ast.expr | None
    #: Whether the dim was passed as ``dim=`` (the repair keeps the user's style).
    dim_by_keyword: bool


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for call in context.nodes(ast.Call):
        if match(context, call) is not None:
            yield (
                call,
                (
                    "log(sum(exp(x))) overflows: exp() is inf for inputs above about 88 in float32 "
                    "(about 11 in float16), so the result and its gradient become inf or nan; "
                    "torch.logsumexp(x, dim) subtracts the maximum first and gives the same value without overflow"
                ),
            )


def match(context: ModuleContext, call: ast.Call) -> LogSumExp | None:
    """The chain when ``call`` is its outer ``log``: ``torch.log(...)`` or ``(...).log()``."""
    inner = _only_argument(context, call, "log")
    if inner is None or not isinstance(inner, ast.Call):
        return None
    summed = _sum(context, inner)
    if summed is None:
        return None
    exponentiated, dim, keepdim, by_keyword = summed
    x = _only_argument(context, exponentiated, "exp") if isinstance(exponentiated, ast.Call) else None
    if x is None or _shifted(x):
        return None
    return LogSumExp(x, dim, keepdim, by_keyword)


def _shifted(x: ast.expr) -> bool:
    """``exp(x - x.max(dim, keepdim=True).values)``, ``exp(x - m)``: something is subtracted
    first, which may already be the maximum (the stable form written out by hand)."""
    return (
        isinstance(x, ast.BinOp)
        and isinstance(x.op, ast.Sub)
        and not (isinstance(x.right, ast.Constant) and isinstance(x.right.value, (int, float)))
    )


def _only_argument(context: ModuleContext, call: ast.Call, name: str) -> ast.expr | None:
    """``x`` of ``torch.<name>(x)`` or of ``x.<name>()``, with nothing else passed (no ``out=``)."""
    func = call.func
    if context.qualname(func) == f"torch.{name}":
        if len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Starred):
            return call.args[0]
        return None
    if (
        isinstance(func, ast.Attribute)
        and func.attr == name
        and not call.args
        and not call.keywords
        and not _is_module(context, func.value)
    ):
        # ``math.log()`` and friends take an argument, so a bare ``.log()`` is a tensor's method.
        return func.value
    return None


def _is_module(context: ModuleContext, expr: ast.expr) -> bool:
    """``np`` in ``np.sum(...)``: a module's function, not a tensor's method."""
    return isinstance(expr, ast.Name) and expr.id in context.imports


def _sum(context: ModuleContext, call: ast.Call) -> tuple[ast.expr, ast.expr, ast.expr | None, bool] | None:
    """(what is summed, dim, keepdim) of ``torch.sum(e, dim, keepdim)`` or ``e.sum(dim, keepdim)``
    when the dim is given and is not None: logsumexp needs one, and sums over everything without."""
    func = call.func
    if context.qualname(func) == "torch.sum":
        if not call.args:
            return None
        summed, rest = call.args[0], call.args[1:]
    elif isinstance(func, ast.Attribute) and func.attr == "sum" and not _is_module(context, func.value):
        summed, rest = func.value, call.args
    else:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or len(rest) > 2:
        return None
    known = {"dim", "axis", "keepdim"}
    if any(kw.arg not in known for kw in call.keywords):
        return None  # dtype=, out=, **kwargs: not something logsumexp takes
    dim = rest[0] if rest else (keyword(call, "dim") or keyword(call, "axis"))
    keepdim = rest[1] if len(rest) > 1 else keyword(call, "keepdim")
    if dim is None or (isinstance(dim, ast.Constant) and dim.value is None):
        return None
    if isinstance(dim, (ast.Tuple, ast.List)) and not dim.elts:
        return None
    return summed, dim, keepdim, not rest


def fix(context: ModuleContext, node: ast.AST) -> Fix | str:
    assert isinstance(node, ast.Call)  # the check reports the outer log() call
    found = match(context, node)
    if found is None:
        return "the expression is no longer log(sum(exp(x), dim))"
    torch, edits = ensure_import(context, "torch", "torch", node)
    dim = text_of(context, found.dim)
    parts = [text_of(context, found.x), f"dim={dim}" if found.dim_by_keyword and dim else dim]
    if found.keepdim is not None:
        parts.append(f"keepdim={text_of(context, found.keepdim)}")
    if not all(parts):
        return "a part of the expression could not be read from the source; rewrite it by hand"
    kept = [found.x, found.dim, *([found.keepdim] if found.keepdim is not None else [])]
    if _comments(text_of(context, node)) > sum(_comments(text_of(context, part)) for part in kept):
        return "a comment inside the expression would be lost; rewrite it by hand"
    replacement = f"{torch}.logsumexp({', '.join(parts)})"
    return Fix(f"rewrite as `{replacement}`", (*edits, replace_node(context, node, replacement)))


def _comments(text: str) -> int:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return 0
    return sum(token.type == tokenize.COMMENT for token in tokens)


RULE = Rule(
    code="TM210",
    name="unstable-logsumexp",
    summary="torch.log(torch.sum(torch.exp(x), dim)) where torch.logsumexp(x, dim) is stable.",
    why=(
        "exp() leaves the float range fast. Measured with torch 2.13 on a 2-vCPU CPU VM: in float32\n"
        "torch.exp(88.72) is 3.4e38 and torch.exp(88.73) is inf; float16 overflows past 11.09. Logits,\n"
        "energies or log-probabilities of that size make the sum inf and the log inf, the gradient\n"
        "is nan, and one such batch can turn the weights to nan. torch.logsumexp subtracts the\n"
        "maximum before exponentiating and gives the same value without overflow: on\n"
        "x = [100., 101.] the hand-written form gives inf and a nan gradient, torch.logsumexp\n"
        "gives 101.3133 (same machine)."
    ),
    fix=(
        "Write torch.logsumexp(x, dim) (keepdim=... as before). The dim is required: without one\n"
        "torch.sum adds everything, which logsumexp does not do. `trainmedic lint --fix` rewrites it."
    ),
    before="""
import torch

def log_partition(energies):
    return torch.log(torch.sum(torch.exp(-energies), dim=-1))
""",
    after="""
import torch

def log_partition(energies):
    return torch.logsumexp(-energies, dim=-1)
""",
    check=check,
    fixer=fix,
)
