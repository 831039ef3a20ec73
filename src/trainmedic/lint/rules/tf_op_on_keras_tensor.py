"""TM103: a raw TensorFlow op applied to a Keras symbolic tensor while building a functional model.

Keras 2 wrapped such ops in a TFOpLambda layer; Keras 3 (TensorFlow >= 2.16) raises "A KerasTensor
cannot be used as input to a TensorFlow function". The same mistake on Keras 3's torch backend is a
``torch.*`` op on one: ``torch.reshape(x, ...)`` raises "TypeError: reshape(): argument 'input'
must be Tensor, not KerasTensor" (checked by running Keras 3.15 on torch 2.13), so torch ops are
flagged too. Which expressions are symbolic tensors is found by dataflow
(``lint/keras_symbolic.py``); this rule names the op, what Keras raises, and the fix.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.keras_symbolic import SymbolicTensors, arguments, is_tf_op
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import last_name, source_order

#: tf op → its keras.ops name, for the fix.
_KERAS_OPS = {
    **{
        name: name
        for name in (
            "shape",
            "reshape",
            "transpose",
            "matmul",
            "expand_dims",
            "squeeze",
            "cast",
            "stack",
            "split",
            "tile",
            "pad",
            "sqrt",
            "square",
            "exp",
            "abs",
            "maximum",
            "minimum",
            "where",
            "einsum",
        )
    },
    "concat": "concatenate",
    "reduce_mean": "mean",
    "reduce_sum": "sum",
    "reduce_max": "max",
    "reduce_min": "min",
    "gather": "take",
    "clip_by_value": "clip",
    # torch spellings
    "cat": "concatenate",
    "mean": "mean",
    "sum": "sum",
    "amax": "max",
    "amin": "min",
    "permute": "transpose",
    "flatten": "reshape",
    "relu": "relu",
    "sigmoid": "sigmoid",
    "softmax": "softmax",
    "clamp": "clip",
}


def _legacy_keras(context: ModuleContext) -> bool:
    """tf_keras (Keras 2 under TF >= 2.16) still wraps TF ops on its symbolic tensors."""
    return "TF_USE_LEGACY_KERAS" in context.source or any(
        module == "tf_keras" or module.startswith("tf_keras.") for module in context.imports.values()
    )


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    if _legacy_keras(context) or not any(q in context.source for q in ("Input", ".output", ".input")):
        return
    if not any(module.split(".")[0] in ("keras", "tensorflow") for module in context.imports.values()):
        return  # no Keras in this module: nothing here is a KerasTensor
    analysis = SymbolicTensors(context)
    lines_done = set()  # x[:, : tf.shape(x)[1], : tf.shape(x)[2]] is one mistake, reported once
    for scope in analysis.scopes:
        flagged = [
            call
            for call in source_order(context.walk_scope(scope))
            if isinstance(call, ast.Call)
            and is_tf_op(context.qualname(call.func) or "")
            and any(analysis.kind(scope, a) for a in arguments(call))
        ]
        ops = set(flagged)
        for call in flagged:
            # tf.reduce_sum(tf.ones_like(x)): one finding, on the op that touches x.
            symbolic = [
                a
                for a in arguments(call)
                if analysis.kind(scope, a) and not any(inner in ops for inner in ast.walk(a))
            ]
            if symbolic and call.lineno not in lines_done:
                lines_done.add(call.lineno)
                torch = (context.qualname(call.func) or "").startswith("torch.")
                yield call, _message(call, _text(context, symbolic[0]), torch)


def _text(context: ModuleContext, expr: ast.AST, limit: int = 40) -> str:
    """The argument as written, cut to ``limit`` characters (a 300-term sum is not a message)."""
    try:
        text = ast.unparse(expr)
    except RecursionError:
        text = " ".join((ast.get_source_segment(context.source, expr) or "...").split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _message(call: ast.Call, arg: str, torch: bool = False) -> str:
    op = last_name(call.func) or ""
    if op == "shape":
        fix = f"use {arg}.shape for static dims or keras.ops.shape({arg})"
    else:
        fix = f"use keras.ops.{_KERAS_OPS[op]}" if op in _KERAS_OPS else "use the keras.ops equivalent"
    qualname = ast.unparse(call.func)
    if torch:
        raises = f"Keras 3 on the torch backend raises \"TypeError: {op}(): argument 'input' must be Tensor, not KerasTensor\""
    else:
        raises = 'Keras 3 raises "A KerasTensor cannot be used as input to a TensorFlow function"'
    return (
        f"{qualname}() on Keras symbolic tensor `{arg}` while building a functional model: "
        f"{raises}; {fix}, or wrap it in a Layer or layers.Lambda"
    )


RULE = Rule(
    code="TM103",
    name="tf-op-on-keras-tensor",
    summary="tf.shape() or another tf.* (or torch.*) op applied to a Keras symbolic tensor in a functional model.",
    why=(
        "Keras 2 silently wrapped TF ops on symbolic tensors in TFOpLambda layers. Keras 3, the default\n"
        "from TensorFlow 2.16, raises ValueError: A KerasTensor cannot be used as input to a TensorFlow\n"
        "function, so the model cannot even be built: batch_size = tf.shape(x)[0] inside an attention\n"
        "block stops a neural receiver on TF 2.20 before its first step. On Keras 3's\n"
        "torch backend a torch.* op on a symbolic tensor fails the same way (TypeError: ... must be Tensor,\n"
        "not KerasTensor)."
    ),
    fix=(
        "Use x.shape for static dimensions (Reshape and most layers handle the batch dimension\n"
        "themselves), keras.ops.* (keras.ops.shape, keras.ops.reshape...) for symbolic ones, or move the\n"
        "TF code into a custom Layer's call() or a layers.Lambda, which receive real tensors. Not flagged:\n"
        "TF ops inside call()/train_step(), inside functions given to layers.Lambda, and on x.shape."
    ),
    before="""
import tensorflow as tf
from tensorflow.keras import layers

def attention_block(x, key_dim=64):
    batch_size = tf.shape(x)[0]
    height, width, channels = x.shape[1:]
    return layers.Reshape((height * width, channels))(x)

inputs = tf.keras.Input(shape=(448, 14, 64))
outputs = attention_block(inputs)
""",
    after="""
import tensorflow as tf
from tensorflow.keras import layers

def attention_block(x, key_dim=64):
    height, width, channels = x.shape[1:]
    return layers.Reshape((height * width, channels))(x)

inputs = tf.keras.Input(shape=(448, 14, 64))
outputs = attention_block(inputs)
""",
    check=check,
    not_fixable=(
        "its keras.ops replacement is not a rename for every op (arguments and return types differ); make the change the message names by hand"
    ),
)
