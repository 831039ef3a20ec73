"""TM102: a checkpoint/early-stopping callback left to guess which way its metric should go.

What ``mode="auto"`` does was read from the Keras sources and checked by running Keras 3.15:

* Keras 3 ``EarlyStopping`` (since 3.0), ``ModelCheckpoint`` and ``ReduceLROnPlateau`` (since
  3.11) know a direction only for ``loss``/``val_loss`` and for a compiled *built-in* metric whose
  name matches exactly; anything else (a metric function, a custom train_step tracker, a
  multi-output ``val_out_accuracy``) raises ValueError at the end of the first epoch.
* tf.keras 2 and Keras < 3.11 guess from the name and never fail: EarlyStopping picks "max" when
  the name ends in acc/accuracy/auc, ModelCheckpoint when it contains "acc" (or starts with
  "fmeasure"), ReduceLROnPlateau when it contains "acc"; everything else is "min".
* Lightning's ``ModelCheckpoint`` and ``EarlyStopping`` default to ``mode="min"`` whatever the name.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import NamedTuple

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import column, end_of, indent_of, insert_at, replace_node, span, text_of
from trainmedic.lint.model import Fix, Rule
from trainmedic.lint.syntax import argument, keyword, string_value

#: Callback → (position of monitor, position of mode) in the signature.
_KERAS = {"EarlyStopping": (0, 4), "ModelCheckpoint": (1, 5), "ReduceLROnPlateau": (0, 4)}
_LIGHTNING = {"EarlyStopping": (0, 4), "ModelCheckpoint": (2, 7)}

#: Keras metric names (class defaults and compile() strings) that carry a direction in Keras 3.
_UP = (
    "accuracy",
    "acc",
    "binary_accuracy",
    "categorical_accuracy",
    "sparse_categorical_accuracy",
    "top_k_categorical_accuracy",
    "sparse_top_k_categorical_accuracy",
    "precision",
    "recall",
    "auc",
    "pearson_correlation",
    "concordance_correlation",
    "fbeta_score",
    "f1_score",
    "cosine_similarity",
    "r2_score",
    "io_u",
    "binary_io_u",
    "mean_io_u",
    "one_hot_io_u",
    "one_hot_mean_io_u",
    "sensitivity_at_specificity",
    "specificity_at_sensitivity",
    "precision_at_recall",
    "recall_at_precision",
)
_DOWN = (
    "hinge",
    "squared_hinge",
    "categorical_hinge",
    "binary_crossentropy",
    "categorical_crossentropy",
    "sparse_categorical_crossentropy",
    "mean_squared_error",
    "mean_absolute_error",
    "mean_absolute_percentage_error",
    "mean_squared_logarithmic_error",
    "root_mean_squared_error",
    "logcosh",
    "mse",
    "mae",
    "mape",
    "msle",
    "bce",
    "kl_divergence",
    "poisson",
)
_KNOWN = {**dict.fromkeys(_UP, "max"), **dict.fromkeys(_DOWN, "min")}
#: Built-in metric classes: a literal ``name=`` given to one of these is a name Keras 3 can resolve.
_CLASS_UP = (
    "Accuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "SparseCategoricalAccuracy",
    "TopKCategoricalAccuracy",
    "SparseTopKCategoricalAccuracy",
    "Precision",
    "Recall",
    "AUC",
    "PearsonCorrelation",
    "ConcordanceCorrelation",
    "FBetaScore",
    "F1Score",
    "CosineSimilarity",
    "R2Score",
    "IoU",
    "BinaryIoU",
    "MeanIoU",
    "OneHotIoU",
    "OneHotMeanIoU",
    "SensitivityAtSpecificity",
    "SpecificityAtSensitivity",
    "PrecisionAtRecall",
    "RecallAtPrecision",
)
_CLASS_DOWN = (
    "Hinge",
    "SquaredHinge",
    "CategoricalHinge",
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "SparseCategoricalCrossentropy",
    "MeanSquaredError",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanSquaredLogarithmicError",
    "RootMeanSquaredError",
    "LogCoshError",
    "KLDivergence",
    "Poisson",
)
_CLASSES = {**dict.fromkeys(_CLASS_UP, "max"), **dict.fromkeys(_CLASS_DOWN, "min")}
#: Words that make a metric name higher- or lower-is-better; a lower word wins ("dice_loss").
_HIGHER = frozenset(
    {
        "acc",
        "accuracy",
        "auc",
        "auroc",
        "auprc",
        "ap",
        "map",
        "f1",
        "f2",
        "fbeta",
        "fscore",
        "fmeasure",
        "iou",
        "miou",
        "jaccard",
        "dice",
        "psnr",
        "ssim",
        "msssim",
        "precision",
        "recall",
        "sensitivity",
        "specificity",
        "tpr",
        "tnr",
        "bleu",
        "rouge",
        "rouge1",
        "rouge2",
        "rougel",
        "meteor",
        "cider",
        "r2",
        "kappa",
        "mcc",
        "ndcg",
        "mrr",
        "top1",
        "top5",
        "acc1",
        "acc5",
        "hitrate",
        "correlation",
        "pearson",
        "spearman",
        "reward",
    }
)
_LOWER = frozenset(
    {
        "loss",
        "error",
        "err",
        "errors",
        "mse",
        "mae",
        "rmse",
        "mape",
        "msle",
        "rmsle",
        "ber",
        "wer",
        "cer",
        "ter",
        "fid",
        "kid",
        "perplexity",
        "ppl",
        "nll",
        "distance",
        "dist",
        "lpips",
        "hinge",
        "crossentropy",
        "entropy",
        "bce",
        "divergence",
        "kl",
        "kld",
        "fpr",
        "fnr",
        "eer",
        "cost",
        "regret",
        "latency",
        "epe",
        "chamfer",
    }
)
_CONSEQUENCE = {
    "EarlyStopping": "training stops while it is still improving",
    "ModelCheckpoint": "the 'best' checkpoint kept is the worst one",
    "ReduceLROnPlateau": "the learning rate is cut while the metric is still improving",
}


def direction(name: str) -> str | None:
    """'max' for a higher-is-better metric name, 'min' for lower-is-better, None when unsure."""
    tokens = re.split(r"[^a-z0-9]+", name.lower())
    words = {*tokens, *(t.rstrip("0123456789") for t in tokens)}  # map50, ap75
    if words & _LOWER:
        return "min"
    return "max" if words & _HIGHER else None


def _legacy_guess(callback: str, monitor: str) -> str:
    if callback == "EarlyStopping":
        return "max" if monitor.endswith(("acc", "accuracy", "auc")) else "min"
    if callback == "ModelCheckpoint":
        return "max" if "acc" in monitor or monitor.startswith("fmeasure") else "min"
    return "max" if "acc" in monitor else "min"


def _literal(context: ModuleContext, call: ast.Call, expr: ast.AST | None) -> str | None:
    """A string literal, or a name the same scope assigns only that one literal."""
    if value := string_value(expr):
        return value
    if not isinstance(expr, ast.Name):
        return None
    values = set()
    for node in context.walk_scope(context.scope_of(call)):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == expr.id for t in targets):
                values.add(string_value(node.value) if not isinstance(node, ast.AugAssign) else None)
    return values.pop() if len(values) == 1 else None


def _declared_metric_names(context: ModuleContext) -> dict[str, str]:
    """``keras.metrics.AUC(name="roc_auc")`` → {"roc_auc": "max"}: names Keras 3 can resolve."""
    declared = {}
    for call in context.nodes(ast.Call):
        qualname = context.qualname(call.func) or ""
        kind = _CLASSES.get(qualname.rsplit(".", 1)[-1]) if qualname.startswith("keras.metrics.") else None
        if kind and (name := string_value(keyword(call, "name"))):
            declared[name] = kind
    return declared


def _keras_message(
    callback: str, monitor: str, call: ast.Call, declared: dict[str, str], outputs: set[str]
) -> str | None:
    metric = monitor.removeprefix("val_")
    if metric == "loss":
        return None
    # auc_1: Keras numbers a second instance of a built-in metric, and still knows its direction.
    known = _KNOWN.get(re.sub(r"_\d+$", "", metric.lower())) or declared.get(metric)
    guessed = _legacy_guess(callback, monitor)
    head = f"{callback}(monitor={monitor!r}) without mode="
    if known is None:
        wanted = direction(metric)
        since = "Keras 3" if callback == "EarlyStopping" else "Keras >= 3.11"
        also = ""
        if wanted is not None and wanted != guessed:
            also = f" (and tf.keras 2 silently guesses mode='{guessed}' for it)"
        fix = f"mode='{wanted}'" if wanted else "mode='min' or mode='max'"
        # val_out_accuracy: the log key of output "out" of several; the metric itself is named accuracy.
        builtins = [name for name in _KNOWN if metric.lower().endswith("_" + name)]
        builtin = max(builtins, key=len) if builtins else ""
        why = ""
        if builtin and metric[: -len(builtin) - 1] in outputs:
            why = f" (it looks for a metric named {metric}, but the compiled one is named {builtin})"
        return (
            f"{head}: {since} cannot tell whether {monitor} should go up or down{why} and raises "
            f"ValueError at the end of the first epoch{also}; pass {fix}"
        )
    if known == guessed or (callback == "ModelCheckpoint" and not _uses_best(call)):
        return None
    older = "tf.keras 2 guesses" if callback == "EarlyStopping" else "tf.keras 2 and Keras < 3.11 guess"
    better = "higher" if known == "max" else "lower"
    consequence = _CONSEQUENCE[callback]
    if callback == "EarlyStopping" and _is_true(argument(call, 6, "restore_best_weights")):
        consequence += " and restore_best_weights keeps the worst epoch"
    return (
        f"{head}: {monitor} is {better}-is-better but {older} mode='{guessed}' from its name, so "
        f"{consequence}; pass mode='{known}'"
    )


def _is_true(expr: ast.AST | None) -> bool:
    """A literal true value: a variable may be False, and the message would then be wrong."""
    return isinstance(expr, ast.Constant) and bool(expr.value)


def _uses_best(call: ast.Call) -> bool:
    """ModelCheckpoint reads the direction only to pick the best checkpoint."""
    best = argument(call, 3, "save_best_only")
    threshold = keyword(call, "initial_value_threshold")
    return _maybe_set(best, default_off=False) or _maybe_set(threshold, default_off=None)


def _maybe_set(expr: ast.AST | None, default_off: object) -> bool:
    """True unless the argument is absent or the literal that leaves the feature off."""
    return expr is not None and not (isinstance(expr, ast.Constant) and expr.value is default_off)


def _lightning_message(callback: str, monitor: str, call: ast.Call) -> str | None:
    if direction(monitor) != "max":
        return None
    top_k = argument(call, 5, "save_top_k") if callback == "ModelCheckpoint" else None
    if isinstance(top_k, ast.Constant) and top_k.value == 0:
        return None
    effect = (
        "best_model_path and save_top_k keep the lowest-scoring checkpoints"
        if callback == "ModelCheckpoint"
        else "every rise counts as no improvement, so training stops while it is still improving"
    )
    return (
        f"{callback}(monitor={monitor!r}) uses Lightning's default mode='min' but {monitor} is "
        f"higher-is-better: {effect}; pass mode='max'"
    )


class _Module:
    """What the Keras lookups need from the whole module, computed once and only when asked."""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        # A custom metric class that declares its own direction makes Keras 3's lookup succeed.
        self.custom_directions = "_direction" in context.source
        self._declared: dict[str, str] | None = None
        self.outputs: set[str] = set()

    @property
    def declared(self) -> dict[str, str]:
        if self._declared is None:
            self._declared = _declared_metric_names(self.context)
            self.outputs = {
                name for d in self.context.nodes(ast.Dict) for k in d.keys if (name := string_value(k))
            }
        return self._declared


class _Finding(NamedTuple):
    message: str
    #: The mode to pass, or None when the metric's name does not say.
    wanted: str | None
    #: The ``mode="auto"`` argument to replace, if there is one.
    auto: ast.expr | None
    monitor: ast.expr


def _judge(module: _Module, call: ast.Call) -> _Finding | None:
    context = module.context
    qualname = context.qualname(call.func) or ""
    callback = qualname.rsplit(".", 1)[-1]
    if qualname.startswith("keras.") and callback in _KERAS:
        positions, framework = _KERAS[callback], "keras"
    elif qualname.startswith("lightning.pytorch.") and callback in _LIGHTNING:
        positions, framework = _LIGHTNING[callback], "lightning"
    else:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None  # mode may come in through *args/**kwargs
    mode = argument(call, positions[1], "mode")
    if mode is not None and not (framework == "keras" and string_value(mode) == "auto"):
        return None
    monitor_node = argument(call, positions[0], "monitor")
    if monitor_node is None:
        return None  # the default monitor: no name to judge
    monitor = _literal(context, call, monitor_node)
    if monitor is None:
        return None
    if framework == "lightning":
        message = _lightning_message(callback, monitor, call)
        return _Finding(message, "max", mode, monitor_node) if message else None
    message = _keras_message(callback, monitor, call, module.declared, module.outputs)
    if not message or (module.custom_directions and "raises ValueError" in message):
        return None
    metric = monitor.removeprefix("val_")
    wanted = (
        _KNOWN.get(re.sub(r"_\d+$", "", metric.lower())) or module.declared.get(metric) or direction(metric)
    )
    return _Finding(message, wanted, mode, monitor_node)


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    module = _Module(context)
    for call in context.nodes(ast.Call):
        judged = _judge(module, call)
        if judged is not None:
            yield call, judged.message


def fix(context: ModuleContext, call: ast.AST) -> Fix | str:
    """Pass the mode the metric's name says: replace ``mode="auto"``, or add ``mode=`` after the
    last argument (on its own line when the call puts one argument per line)."""
    assert isinstance(call, ast.Call)  # what check() reports: the callback's call
    judged = _judge(_Module(context), call)
    if judged is None or judged.wanted is None:
        return (
            "the metric's name does not say whether it should go up or down; pass mode='min' or "
            "mode='max' yourself"
        )
    quote = "'" if text_of(context, judged.monitor)[:1] == "'" else '"'
    value = f"{quote}{judged.wanted}{quote}"
    if judged.auto is not None:
        return Fix(f"mode={value} instead of 'auto'", (replace_node(context, judged.auto, value),))
    arguments: list[ast.expr | ast.keyword] = sorted(
        [*call.args, *(k for k in call.keywords)], key=lambda n: (n.lineno, n.col_offset)
    )
    if not arguments:
        return "the call has no arguments to add mode= after; pass it yourself"
    last = arguments[-1]
    line, col, end_line, end_col = span(context, last)
    one_per_line = len(arguments) > 1 and end_of(arguments[-2])[0] < last.lineno and owns_start(context, last)
    text = f",\n{indent_of(context, line)}mode={value}" if one_per_line else f", mode={value}"
    return Fix(f"pass mode={value}", (insert_at(end_line, end_col, text),))


def owns_start(context: ModuleContext, node: ast.expr | ast.keyword) -> bool:
    """Only whitespace before ``node`` on its first line."""
    return not context.lines[node.lineno - 1][: column(context, node.lineno, node.col_offset) - 1].strip()


RULE = Rule(
    code="TM102",
    name="monitor-without-mode",
    summary="EarlyStopping/ModelCheckpoint/ReduceLROnPlateau monitoring a metric whose direction is guessed.",
    why=(
        "In Keras 3 these callbacks infer min/max only for loss and for compiled built-in metrics; any\n"
        "other name (a metric function such as bit_error_rate or dice_coef, a custom train_step tracker,\n"
        "a multi-output 'val_out_accuracy') raises ValueError after the first epoch has been paid for.\n"
        "EarlyStopping(monitor='val_bit_error_rate') crashes a Keras 3 run at the end of epoch 1.\n"
        "tf.keras 2 (and Keras < 3.11 for ModelCheckpoint/ReduceLROnPlateau) never fails: it picks 'max'\n"
        "only for names with 'acc' in them, so a higher-is-better val_auc, val_f1 or val_dice is minimised\n"
        "in silence: the checkpoint kept is the worst one, early stopping stops on improvement. Lightning's\n"
        "callbacks default to mode='min' for every name, val_acc included."
    ),
    fix=(
        "Say which way the metric should go: mode='min' for errors and losses, mode='max' for accuracy,\n"
        "AUC, F1, IoU, Dice, PSNR. Not flagged: monitor='val_loss', an explicit mode=, and compiled\n"
        "built-in metrics whose direction every Keras version gets right (val_accuracy, val_mae).\n"
        "`trainmedic lint --fix` passes the mode the metric's name says; a name that says neither is\n"
        "left for you."
    ),
    before="""
from tensorflow import keras

model.compile(optimizer="adam", loss="mse", metrics=[bit_error_rate])
callbacks = [
    keras.callbacks.EarlyStopping(monitor="val_bit_error_rate", patience=5, restore_best_weights=True),
]
""",
    after="""
from tensorflow import keras

model.compile(optimizer="adam", loss="mse", metrics=[bit_error_rate])
callbacks = [
    keras.callbacks.EarlyStopping(
        monitor="val_bit_error_rate", mode="min", patience=5, restore_best_weights=True
    ),
]
""",
    check=check,
    fixer=fix,
)
