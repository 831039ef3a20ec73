"""tiny_ops: thousands of small tensor operations per step; dispatch dominates.

The fix is ``trainmedic.batch``: one batched call over ``[batch, ...]`` tensors instead of one
call per sample. The op census charges every torch call to the innermost user function, so the
function the finding points at is usually the per-sample function itself (a
``generate_iq_sample``), and the advice names it. When the loop over samples sits inside that function
(a ``make_batch`` that builds each sample inline), the function already makes the whole batch:
what to batch is the loop's body, and the advice says so first.
"""

from __future__ import annotations

import ast
import os

from trainmedic.run.diagnose.launches import LAUNCHES
from trainmedic.run.diagnose.rules.base import Advice, Context, at, is_keras
from trainmedic.run.probe.frames import read_tree
from trainmedic.run.probe.recorder import split_function_key

#: Stands for the user's per-sample function when the census cannot name it.
PLACEHOLDER = "<per_sample_fn>"
#: Batching 256 samples per call cuts the launches' cost 8-10x (a generator of IQ samples, measured).
BATCHED = 8.0

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


#: Of the host's launch time, what CUDA graphs or compiled, fused kernels leave (a rough quarter).
LAUNCHES_LEFT = 0.25


def advise(kind: str, ctx: Context) -> Advice:
    if kind == LAUNCHES:
        return _launches(ctx)
    # 70,000 tiny launches for one batch; batching 256 samples per call is 8-10x faster.
    launch = "kernel launches" if ctx.device == "cuda" else "operator dispatches"
    name, loop_inside = _function(ctx)
    fn = name if name and not loop_inside else PLACEHOLDER
    if is_keras(ctx):
        return _keras(ctx, name, launch)
    if _module_level(ctx):
        # No function to name: the loop's body is the script's own top-level code (a
        # generator written straight into the script). batch.vectorize takes a function.
        loop = f" at {ctx.loop}" if ctx.loop else at(ctx)
        what = (
            f"The per-sample loop{loop} runs at module level: move its body into a function of one "
            f"sample (`def make_sample(...)`: the calls that make one sample, returning its tensors), "
            "then `gen = batch.vectorize(make_sample)`"
        )
        fn, instead, whole = "make_sample", "the loop", ""
    elif name and loop_inside:
        what = (
            f"Batch the loop in {name}() with trainmedic.batch: move its body into a function of one "
            f"sample ({fn}), then `gen = batch.vectorize({fn})`"
        )
        instead = "the loop"
        # The loop may run over the samples (make_batch) or over parts of one sample (receivers,
        # multipath echoes): source alone cannot tell, so both readings get their call.
        whole = f"; if {name}() makes one sample, batch it whole: `batch.vectorize({name})`"
    else:
        what = f"Batch the per-sample function with trainmedic.batch: `gen = batch.vectorize({fn})`"
        instead, whole = "one call per sample", ""
    fix = (
        f"{what} and one call `gen(...)` over the whole [batch, ...] tensors instead of {instead}, "
        f"or `batch.generate({fn}, params, out=...)` for a generation job (progress, Ctrl+C, "
        f"resumable shards){whole}. Take random draws from an `rng` argument (batch.Rng) so the batched run "
        f"reproduces the per-sample one. The {launch} drop from thousands to a handful: typically "
        "8-10x faster; on a GPU, CUDA graphs or torch.compile cut what remains."
    )
    return Advice(
        f"{ctx.ops_per_step:,.0f} tiny tensor ops per {ctx.unit} in a Python loop{at(ctx)}",
        fix,
        factor=factor(ctx),
        # Pasteable only when it names the user's own function; a placeholder would not run.
        suggestion=f"batch.vectorize({fn})" if fn != PLACEHOLDER and name else None,
    )


def factor(ctx: Context) -> float:
    """How much faster the loop gets batched: its call overhead drops ~8x, its
    calls' own work stays."""
    if ctx.overhead_share is None:
        return BATCHED
    return 1.0 / ((1.0 - ctx.overhead_share) + ctx.overhead_share / BATCHED)


def _keras(ctx: Context, name: str | None, launch: str) -> Advice:
    # The loop sits in a Keras layer's call() or a train_step: keras.ops run on every backend,
    # trainmedic.batch only on torch, so the fix is named in Keras's own terms.
    where = f" in {name}()" if name else at(ctx)  # a <listcomp> frame has no name to give
    fix = (
        f"Replace the per-sample Python loop{where} with keras.ops over the whole [batch, ...] tensors "
        "(they broadcast over the batch axis), or map a function of one sample over the batch in one call with "
        f"`keras.ops.vectorized_map(fn, x)`. The {launch} drop from thousands to a handful: typically 8-10x faster."
    )
    return Advice(
        f"{ctx.ops_per_step:,.0f} tiny tensor ops per {ctx.unit} in a Python loop{at(ctx)}",
        fix,
        factor=factor(ctx),
    )


def batch_site(ctx: Context) -> str | None:
    """The line to name for a tiny-op loop: the code the fix batches, not one line inside it.

    A per-sample function is batched whole, so its ``def`` line is named; a module-level loop's
    body moves into a function, so the loop's line is. Inside such code a stack sampler cannot
    rank the lines: the training thread hands the GIL over at its next torch call, so the first
    call of each sample absorbs the Python work before it (a ``torch.randint`` at 3 % of the time
    measured read as the hottest line). A loop inside a larger function keeps its hottest line.
    """
    if _module_level(ctx):
        return ctx.loop or ctx.where
    name, loop_inside = _function(ctx)
    if name is None or loop_inside or not ctx.function:
        return ctx.where
    path, first, _ = split_function_key(ctx.function)
    node = _function_node(path, first) if path else None
    if node is None:
        return ctx.where
    place = ctx.where.rpartition(":")[0] if ctx.where else None
    return f"{place}:{node.lineno}" if place else ctx.where


def _module_level(ctx: Context) -> bool:
    if not ctx.function:
        return False
    return split_function_key(ctx.function)[2] == "<module>"


def _function(ctx: Context) -> tuple[str | None, bool]:
    """(the function's name, whether the hot line sits in a loop inside it).

    ``<module>`` and, before Python 3.12, ``<listcomp>`` frames have no name to give.
    """
    if not ctx.function:
        return None, False
    path, first, name = split_function_key(ctx.function)
    if path is None or not name.isidentifier():
        return None, False
    if ctx.loop:
        # The steps were iterations of the loop at ctx.loop: a function it calls (not the one it
        # sits in) runs once per iteration, so it is the per-sample function, whatever loops over
        # parts of a sample (multipath echoes) it holds.
        loop_line = _line_of(ctx.loop, path)
        return name, loop_line is not None and _within_function(path, first, loop_line)
    line = _line_of(ctx.where, path)
    return name, line is not None and _loop_around(path, first, line)


def _line_of(where: str | None, path: str) -> int | None:
    """The line of ``where`` when it is in the function's file (``where`` is shown relative to
    the working directory, the function key keeps the interpreter's filename)."""
    if not where:
        return None
    place, _, line = where.rpartition(":")
    if not line.isdigit() or os.path.realpath(place) != os.path.realpath(path):
        return None
    return int(line)


def _loop_around(path: str, first: int, line: int) -> bool:
    """True when ``line`` is inside a loop or comprehension of the function starting at ``first``."""
    node = _function_node(path, first)
    return node is not None and any(
        isinstance(inner, _LOOPS) and _spans(inner, line) and not _outside_body(inner, line)
        for inner in ast.walk(node)
    )


def _within_function(path: str, first: int, line: int) -> bool:
    node = _function_node(path, first)
    return node is not None and _spans(node, line)


def _function_node(path: str, first: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    tree = read_tree(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        # co_firstlineno is the first decorator's line for a decorated function.
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and first in (
            node.lineno,
            *(d.lineno for d in node.decorator_list),
        ):
            return node
    return None


def _spans(node: ast.stmt | ast.expr, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)


def _outside_body(loop: ast.AST, line: int) -> bool:
    """A ``for`` line's own iterable runs once; only the body repeats. Comprehensions and
    ``while`` tests repeat as a whole."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        return not any(_spans(stmt, line) for stmt in loop.body)
    return False


def _launches(ctx: Context) -> Advice:
    """The model's own step on a GPU that waits for its kernels to be launched."""
    busy = ctx.device_busy_share
    idle = f"idle {1 - busy:.0%} of the model's time" if busy is not None else "mostly idle"
    calls = f"{ctx.ops_per_step:,.0f} calls a {ctx.unit}" if ctx.ops_per_step else "its calls"
    fix = (
        f"The GPU is {idle}: it finishes each kernel before Python has launched the next ({calls}). "
        "A larger batch costs little more time per step here: try 2-4x the batch (`trainmedic tune` "
        "measures it). Fewer launches: `torch.compile(model)` fuses the elementwise chains, "
        '`mode="reduce-overhead"` replays the step as CUDA graphs, and a fused optimizer '
        "(`torch.optim.AdamW(..., fused=True)`) makes one launch of the update."
    )
    factor = (
        1.0 / (busy + (1.0 - busy) * LAUNCHES_LEFT) if busy is not None else 1.0 / (0.5 + 0.5 * LAUNCHES_LEFT)
    )
    return Advice(f"The GPU waits for the model's kernel launches{at(ctx)}", fix, factor=factor)
