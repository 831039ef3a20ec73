"""TM101: a lambda or nested function that captures a loop variable and is called after the loop.

Python closures look names up when they run, not when they are made. A callable that outlives
its iteration (a Keras ``Lambda`` layer, a hook, an LR lambda, a stored function) sees whatever
the variable holds at call time: usually its last value.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixers.bind_default import fix
from trainmedic.lint.loop_closures import Closure, late_captures
from trainmedic.lint.model import Rule

_FUNCTIONS = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)


def _describe(function: Closure, variables: list[str]) -> tuple[str, str]:
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    # Keyword-only, as --fix writes it: a caller that passes one more positional argument than
    # the code shows (Keras' LearningRateScheduler passes the current rate) cannot overwrite it.
    star = f"*{function.args.vararg.arg}" if function.args.vararg else "*"
    signature = ", ".join([*params, star, *(f"{v}={v}" for v in variables)])
    if isinstance(function, ast.Lambda):
        return "lambda", f"`lambda {signature}: ...`"
    return f"nested function {function.name}()", f"`def {function.name}({signature}):`"


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for function in context.nodes(*_FUNCTIONS):
        first = next(late_captures(context, function), None)
        if first is not None:
            yield function, _message(function, first[1], first[2])


def _message(function: Closure, captured: list[str], how: str) -> str:
    what, fix = _describe(function, captured)
    names = ", ".join(f"`{n}`" for n in captured)
    plural = "s" if len(captured) > 1 else ""
    if how.startswith("is run by"):
        effect = "it may read a later iteration's value"
    else:
        effect = "every call sees the value from the last iteration"
    them = "them" if plural else "it"
    return (
        f"{what} captures loop variable{plural} {names} and {how}: {effect}; "
        f"bind {them} now with {fix} or functools.partial"
    )


RULE = Rule(
    code="TM101",
    name="late-bound-loop-variable",
    summary=(
        "A lambda or nested function built in a loop reads the loop variable when it runs, not when built."
    ),
    why=(
        "Closures look variables up at call time. A Keras Lambda layer, a forward hook, a LambdaLR or a\n"
        "function stored in a list runs after the loop has moved on, so every copy sees the last value.\n"
        "Nothing fails: the model trains on the wrong slice, or every hook writes the same key.\n"
        "layers.Lambda(lambda x: x[:, rx_idx]) built once per receive antenna makes every branch read\n"
        "the last antenna (rx_idx = 3)."
    ),
    fix=(
        "Bind the value when the callable is made: a default argument (lambda x, *, i=i: x[:, i]) or\n"
        "functools.partial(fn, i=i). Not flagged: lambdas called at once (sorted/min/max key=, map,\n"
        "filter, re.sub, reduce, tf.data dataset.map, which traces its function on the spot), callables\n"
        "passed to unknown functions, and loops that fit or step a model every iteration (k-fold).\n"
        "trainmedic lint --fix adds keyword-only defaults (lambda t, *, i=i: t[:, i]): a caller that passes\n"
        "one more positional argument (Keras's LearningRateScheduler tries schedule(epoch, lr)) cannot\n"
        "overwrite them."
    ),
    before="""
from tensorflow.keras import layers

branches = []
for rx_idx in range(num_rx_antennas):
    x = layers.Lambda(lambda t: t[:, rx_idx, :, :, :])(inputs)
    branches.append(layers.Conv2D(64, 3, padding="same")(x))
""",
    after="""
from tensorflow.keras import layers

branches = []
for rx_idx in range(num_rx_antennas):
    x = layers.Lambda(lambda t, idx=rx_idx: t[:, idx, :, :, :])(inputs)
    branches.append(layers.Conv2D(64, 3, padding="same")(x))
""",
    check=check,
    fixer=fix,
)
