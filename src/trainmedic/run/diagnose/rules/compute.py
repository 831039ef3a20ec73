"""compute: the model's own work. The healthy state; the levers left are cheaper arithmetic."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from trainmedic.run.diagnose.rules.base import Advice, Context, at, is_keras

#: Where the measured answer to "which batch, precision and compile" comes from, when the run's
#: command is not known (``tune_pointer`` names the user's own script and options when it is).
TUNE = (
    "`trainmedic tune model.py:build` measures batch size × precision × compile and says which is "
    "fastest and why (roofline); `trainmedic tune --script train.py --set batch_size=2,4,8` for this script."
)

#: Option leaf names (lower case, "-" as "_") that name the per-step batch, in order of
#: preference. ``trainmedic tune --script`` knows its batch option by the same names.
BATCH_NAMES = (
    "batch_size",
    "per_device_train_batch_size",
    "train_batch_size",
    "micro_batch_size",
    "per_gpu_train_batch_size",
    "batch_size_per_gpu",
    "per_device_batch_size",
    "batchsize",
    "mini_batch_size",
    "minibatch_size",
    "micro_batch",
    "batch",
    "bs",
    "train_bs",
)
_NOT_TRAINING = re.compile(r"(^|_)(eval|val|valid|validation|test|predict|inference)(_|$)")
_FLAG = re.compile(r"-{1,2}[A-Za-z][\w.\-]*")
_HYDRA = re.compile(r"(\+{1,2})?([A-Za-z_][\w.]*)=(.*)")
_FLAG_LITERAL = re.compile(r"""["'](--?[A-Za-z][\w.\-]*)["']""")


def batch_option(names: Sequence[str]) -> str | None:
    """Which of ``names`` (flags, Hydra keys) is the training step's batch size, or None."""
    leaves = {name: name.lstrip("-+~").lower().replace("-", "_").rsplit(".", 1)[-1] for name in names}
    for wanted in BATCH_NAMES:
        for name, leaf in leaves.items():
            if leaf == wanted:
                return name
    # train_batch_size-like names the list lacks; an eval/test batch is not the training step's.
    return next(
        (n for n, leaf in leaves.items() if leaf.endswith("batch_size") and not _NOT_TRAINING.search(leaf)),
        None,
    )


def advise(kind: str, ctx: Context) -> Advice:
    pointer = tune_pointer(ctx)
    if is_keras(ctx):
        where = (
            "the GPU is busy with the model" if ctx.device == "cuda" else "the time goes to the model itself"
        )
        fix = (
            f"Healthy: {where}. Next levers in Keras: "
            '`keras.mixed_precision.set_global_policy("mixed_bfloat16")` (or "mixed_float16" on older GPUs), '
            "`model.compile(..., jit_compile=True)`, and the batch size; do not assume the largest that fits is "
            f"fastest: {pointer}"
        )
        return Advice(
            f"The model's forward, backward and optimizer step{at(ctx)}",
            fix,
            2.0 if ctx.device == "cuda" else 1.3,
        )
    if ctx.device == "cuda":
        fix = (
            "Healthy: the GPU is busy with the model. Next levers: bf16 autocast "
            "(`torch.autocast('cuda', dtype=torch.bfloat16)`), `torch.compile(model)`, and the "
            f"batch size; do not assume the largest that fits is fastest. {pointer}"
        )
        factor = 2.0  # tensor-core bf16 over fp32 matmuls, conservatively
    else:
        fix = (
            "Healthy for a CPU run: the time goes to the model itself. The big lever is a GPU; "
            f"on the CPU, `torch.compile(model)` and bf16 autocast on CPUs with AVX512-BF16 or AMX. {pointer}"
        )
        factor = 1.3
    return Advice(f"The model's forward, backward and optimizer step{at(ctx)}", fix, factor)


def tune_pointer(ctx: Context) -> str:
    """How to measure this run's batch size with ``trainmedic tune``, in the run's own words.

    ``tune --script`` takes the script's path, ``--set NAME=V1,V2`` (the first value is the
    baseline, so the current one goes first) and the script's other arguments after ``--``.
    """
    build = "`trainmedic tune model.py:build` measures batch size × precision × compile and says which is fastest and why (roofline)"
    if not ctx.command:
        return TUNE
    if ctx.command[0] == "-m":
        module = ctx.command[1] if len(ctx.command) > 1 else "MODULE"
        return (
            f"{build}; `trainmedic tune --script` takes a script's file, not -m {module}: give it the file "
            f"(`trainmedic tune --script {module.replace('.', '/')}.py --set batch_size=...`)."
        )
    script, args = ctx.command[0], list(ctx.command[1:])
    found = _batch_in_args(args)
    name: str | None
    if found is not None:
        name, value, rest = found
        current = _positive_int(value) or _model_batch(ctx)
    else:
        name, rest, current = _batch_in_source(script), args, _model_batch(ctx)
    if name is None:
        shown = shlex.join([script, *args])
        return (
            f"{build}. `{shown}` has no batch-size option that `trainmedic tune --script` can set: add one "
            '(e.g. `parser.add_argument("--batch-size", type=int)` used where the batch is made), then '
            f"`{_tune_command(script, 'batch_size', current, args)}` measures it; or put the model in a "
            "`build(batch_size)` function for `trainmedic tune model.py:build`."
        )
    return f"{build}; for this run: `{_tune_command(script, name, current, rest)}`."


def _tune_command(script: str, name: str, current: int | None, rest: Sequence[str]) -> str:
    values = _ladder(current)
    tail = f" -- {shlex.join(rest)}" if rest else ""
    return f"trainmedic tune --script {shlex.quote(script)} --set {name}={values}{tail}"


def _ladder(current: int | None) -> str:
    """The current batch first (tune's baseline), then half and double it."""
    if current is None:
        return "32,16,64"
    return ",".join(str(b) for b in dict.fromkeys([current, max(current // 2, 1), current * 2]))


def _batch_in_args(args: list[str]) -> tuple[str, str, list[str]] | None:
    """(the ``--set`` name, its value, the other arguments) for the batch option in ``args``."""
    end = args.index("--") if "--" in args else len(args)  # after a bare --, tokens are positional
    candidates: dict[str, tuple[str, int, int]] = {}  # --set name -> (value, first index, tokens)
    for i, token in enumerate(args[:end]):
        flag, eq, value = token.partition("=")
        if _FLAG.fullmatch(flag):
            if eq:
                candidates.setdefault(_set_name(flag), (value, i, 1))
            elif i + 1 < end and not args[i + 1].startswith("-"):
                candidates.setdefault(_set_name(flag), (args[i + 1], i, 2))
        elif (match := _HYDRA.fullmatch(token)) is not None:
            candidates.setdefault(match.group(2), (match.group(3), i, 1))
    name = batch_option(list(candidates))
    if name is None:
        return None
    value, at_index, width = candidates[name]
    return name, value, args[:at_index] + args[at_index + width :]


def _batch_in_source(script: str) -> str | None:
    """The batch flag a script's source spells (``add_argument("--batch-size", ...)``), as a --set name."""
    try:
        source = Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flag = batch_option(list(dict.fromkeys(_FLAG_LITERAL.findall(source))))
    return _set_name(flag) if flag is not None else None


def _set_name(flag: str) -> str:
    # tune --script spells `batch_size` as the script's --batch-size or --batch_size; a
    # single-dash flag keeps its dash (tune takes `--set -b=...` as it is).
    return flag.lstrip("-").replace("-", "_") if flag.startswith("--") else flag


def _model_batch(ctx: Context) -> int | None:
    return ctx.sources.model_batch if ctx.sources is not None else None


def _positive_int(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) > 0 else None
