"""TM209: ``p.require_grad = False``: a misspelt ``requires_grad`` that sets a new attribute."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import column, end_of, text_of
from trainmedic.lint.model import Edit, Fix, Rule
from trainmedic.lint.syntax import string_value

#: Misspellings of the flag, as assigned: each just adds an attribute to the tensor.
_FLAG_TYPOS = frozenset(
    {
        "require_grad",
        "require_grads",
        "requires_grads",
        "requires_gradient",
        "require_gradient",
        "requiregrad",
        "requiresgrad",
        # Assigning to the method's name hides the method on that one object and sets nothing.
        "requires_grad_",
    }
)
#: Misspellings of the in-place method, as called: an AttributeError when the line is reached.
_METHOD_TYPOS = frozenset({"require_grad_", "requires_grads_", "require_grads_"})


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    owned = _attributes_read(context)
    for target in _assigned_attributes(context):
        if target.attr in _FLAG_TYPOS and target.attr not in owned and not _own_object(target.value):
            yield target, _flag_message(context, target)
    for call in context.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _METHOD_TYPOS and func.attr not in owned:
            yield (
                func,
                (
                    f"`{func.attr}()` is not a method of tensors or modules: this line raises "
                    "AttributeError when it runs, which may be hours into training (an unfreeze "
                    "at epoch N); the method is `requires_grad_()`"
                ),
            )
        elif _is_setattr_typo(context, call):
            name = string_value(call.args[1])
            yield (
                call.args[1],
                (
                    f"setattr(..., {name!r}, ...) sets a new attribute, not the `requires_grad` flag: "
                    "nothing is frozen or unfrozen; the attribute is `requires_grad`"
                ),
            )


def _assigned_attributes(context: ModuleContext) -> Iterator[ast.Attribute]:
    for node in context.nodes(ast.Assign, ast.AnnAssign, ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                    yield part


def _attributes_read(context: ModuleContext) -> set[str]:
    """Attribute names the file reads (other than as a method it calls) or defines as methods:
    then ``require_grad`` is the user's own setting (``if cfg.require_grad:``), not a typo."""
    called = {node.func for node in context.nodes(ast.Call)}
    names = {
        node.attr
        for node in context.nodes(ast.Attribute)
        if isinstance(node.ctx, ast.Load) and node not in called
    }
    return names | {node.name for node in context.nodes(ast.FunctionDef, ast.AsyncFunctionDef)}


def _own_object(value: ast.expr) -> bool:
    """``self.require_grad = ...``: an attribute of the user's own class, not of a tensor."""
    return isinstance(value, ast.Name) and value.id in ("self", "cls")


def _is_setattr_typo(context: ModuleContext, call: ast.Call) -> bool:
    return (
        isinstance(call.func, ast.Name)
        and call.func.id == "setattr"
        and "setattr" not in context.imports
        and len(call.args) == 3
        and string_value(call.args[1]) in _FLAG_TYPOS
    )


def _flag_message(context: ModuleContext, target: ast.Attribute) -> str:
    statement = next(a for a in context.ancestors(target) if isinstance(a, ast.stmt))
    value = getattr(statement, "value", None)
    owner = text_of(context, target.value) or "the tensor"
    if isinstance(value, ast.Constant) and value.value is False:
        effect = (
            f"`{owner}` keeps its flag: a parameter is not frozen, autograd still computes its "
            "gradient and an optimizer that holds it still updates it"
        )
    elif isinstance(value, ast.Constant) and value.value is True:
        effect = f"`{owner}` is not made trainable: no gradient reaches it"
    else:
        effect = f"`{owner}`'s requires_grad does not change"
    return (
        f"`.{target.attr}` is not the flag autograd reads; Python just adds a new attribute, so {effect}; "
        "the attribute is `requires_grad`"
    )


def fix(context: ModuleContext, node: ast.AST) -> Fix | str:
    if isinstance(node, ast.Attribute):
        wanted = "requires_grad_" if node.attr in _METHOD_TYPOS else "requires_grad"
        line, end = end_of(node)
        end_col = column(context, line, end)
        edit = Edit(line, end_col - len(node.attr), line, end_col, wanted)
        return Fix(f"rename `.{node.attr}` to `.{wanted}`", (edit,))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = text_of(context, node)
        if node.value not in text:
            return "the attribute's name is written with escapes or across lines; rename it by hand"
        line, end = end_of(node)
        start_col = column(context, node.lineno, node.col_offset)
        renamed = text.replace(node.value, "requires_grad", 1)
        edit = Edit(node.lineno, start_col, line, column(context, line, end), renamed)
        return Fix(f"rename {node.value!r} to 'requires_grad'", (edit,))
    return "the misspelt name could not be located"


RULE = Rule(
    code="TM209",
    name="require-grad-typo",
    summary="An assignment to `.require_grad` (or another misspelling of `requires_grad`).",
    why=(
        "Tensors and parameters accept any new attribute, so `p.require_grad = False` runs without\n"
        "an error and changes nothing: autograd reads `requires_grad`. A layer meant to be frozen\n"
        "keeps training (its pretrained weights drift, the run costs the backward pass and the\n"
        "optimizer state for it), and a tensor meant to be trainable gets no gradient, so it\n"
        "silently stays at its initial value. Nothing in the loss curve says which one happened."
    ),
    fix=(
        "Spell it `requires_grad` (`p.requires_grad = False`), or call `p.requires_grad_(False)`, or\n"
        "for a whole module `module.requires_grad_(False)`. `trainmedic lint --fix` renames the\n"
        "attribute."
    ),
    before="""
for param in model.backbone.parameters():
    param.require_grad = False
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=1e-3)
""",
    after="""
for param in model.backbone.parameters():
    param.requires_grad = False
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=1e-3)
""",
    check=check,
    fixer=fix,
)
