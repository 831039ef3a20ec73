"""TM113: a loop that makes one sample per iteration on the GPU."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.model import Rule
from trainmedic.lint.sample_loops import SampleLoop, calls_in, kept_values, making, sample_loops
from trainmedic.lint.sample_makers import (
    CalleeFacts,
    builds_a_network,
    builds_test_inputs,
    callee_facts,
    copies_back,
    copies_to_gpu,
    earliest,
    in_a_network,
    large_factory,
    local_functions,
    moves_to_gpu,
    named_as_maker,
    runs_a_model,
    runs_on_gpu,
    user_function,
    vectorized,
    vectorized_names,
    where_drawn,
)
from trainmedic.lint.syntax import last_name


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    # Every finding needs a device named in a call, a copy back (.cpu()) or cupy: a file with
    # none of them has no GPU loop, and most files say so before a single loop is read.
    gpu_library = any(m.split(".")[0] in ("torch", "cupy", "cupyx") for m in context.imports.values())
    if not (gpu_library or ".cpu()" in context.source) or not any(
        word in context.source for word in ("device", ".cpu()", "cupy", "cuda")
    ):
        return
    flagged: list[ast.AST] = []
    cache: dict = {}
    batched: set[str] | None = None  # names bound to vectorized functions, found once
    for loop in sample_loops(context):
        if loop.node in context.step_loops or (flagged and _inside(loop.node, flagged)):
            continue  # a training loop, or the samples of an outer loop already reported
        if in_a_network(context, loop.node) or builds_test_inputs(context, loop.node):
            continue  # a model's own code (its heads, masks, buffers), or a test's inputs
        kept = kept_values(context, loop)
        if not kept:
            continue
        body_calls = calls_in(loop.body)
        if any(call in context.step_markers for call in body_calls):
            continue
        exprs, carried = making(loop, kept)
        if carried:
            continue
        calls = calls_in(exprs)
        if not calls or any(large_factory(context, c) or builds_a_network(context, c) for c in calls):
            continue
        if batched is None:
            batched = vectorized_names(context)
        if any(runs_a_model(context, c) or vectorized(context, c, batched) for c in body_calls):
            continue
        fresh = loop.changing
        device_ops = [
            c
            for c in calls
            if runs_on_gpu(context, c, fresh) and not moves_to_gpu(c) and not copies_to_gpu(context, c)
        ]
        readbacks = [c for c in calls if copies_back(context, c)]
        draws = {c: where for c in calls if (where := where_drawn(context, c, fresh)) is not None}
        helpers: list[tuple[ast.Call, CalleeFacts]] = []
        model = False
        for call in calls:
            functions = local_functions(context, call)
            if functions:
                helper = callee_facts(context, functions, cache)
                model = model or helper.model
                helpers.append((call, helper))
        if model:
            continue
        # A sample is made, not processed: random draws, or the user's own generator function
        # (``generate_iq_sample``), rather than per-item work on data that exists already.
        drawn_on_gpu = "gpu" in draws.values() or any(h.draws_on_gpu for _, h in helpers)
        drawn = bool(draws) or any(h.draws for _, h in helpers)
        named = any(named_as_maker(c) for c in calls if user_function(context, c))
        on_gpu = bool(device_ops) or any(h.gpu is not None for _, h in helpers)
        if not (drawn_on_gpu or (on_gpu and (drawn or named)) or (readbacks and (drawn or named or on_gpu))):
            continue
        flagged.append(loop.node)
        transfers = [c for c in calls if moves_to_gpu(c) or copies_to_gpu(context, c)]
        gpu_helpers = [(c, h) for c, h in helpers if h.gpu is not None]
        yield loop.node, _message(context, loop, calls, device_ops, gpu_helpers, readbacks, transfers)


def _inside(node: ast.AST, outer: Iterable[ast.AST]) -> bool:
    return any(node is o or any(node is n for n in ast.walk(o)) for o in outer)


def _short(call: ast.Call) -> str:
    """The call as written, or a short form: ``torch.randn(...)``, ``torch.from_numpy(...).cuda()``."""
    text = ast.unparse(call)
    if len(text) <= 50:
        return text
    func = ast.unparse(call.func)
    if len(func) <= 45:
        return f"{func}(...)"
    args = "(...)" if call.args or call.keywords else "()"
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call):
        inner = f"{ast.unparse(call.func.value.func)}(...)"
        if len(inner) <= 40:
            return f"{inner}.{call.func.attr}{args}"
    return f"{last_name(call.func) or 'call'}{args}"


def _message(
    context: ModuleContext,
    loop: SampleLoop,
    calls: list[ast.Call],
    device_ops: list[ast.Call],
    helpers: list[tuple[ast.Call, CalleeFacts]],
    readbacks: list[ast.Call],
    transfers: list[ast.Call],
) -> str:
    evidence = []
    first = earliest([*device_ops, *transfers, *(call for call, _ in helpers)])
    if first is not None:
        helper = next((h for call, h in helpers if call is first), None)
        if helper is not None and helper.gpu is not None:
            evidence.append(
                f"`{_short(first)}` at line {first.lineno}, whose `{_short(helper.gpu)}` runs on the GPU"
            )
        else:
            evidence.append(f"`{_short(first)}` at line {first.lineno}")
    readback = earliest(readbacks)
    if readback is not None and not (first is not None and _inside(first, [readback])):
        evidence.append(f"`{_short(readback)}` at line {readback.lineno}")
    elif readback is not None:
        evidence[-1] = f"`{_short(readback)}` at line {readback.lineno}"
    syncs = [
        c.func.attr for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr in ("item", "tolist")
    ]
    costs = "its own kernel launches"
    if readback is not None or transfers:
        costs += " and a copy between host and GPU"
    elif syncs:
        costs += f" and a wait for the GPU (`.{syncs[0]}()`)"
    users = sorted({name for c in calls if (name := user_function(context, c))})
    helper_calls = [call for call, _ in helpers]
    own_ops = [c for c in device_ops if not _inside(c, helper_calls)]
    back = ", copied back once" if readback is not None else ""
    if len(users) == 1 and not own_ops:
        fn = users[0]
        fix = (
            f"batch {fn}() with trainmedic.batch: `gen = batch.vectorize({fn})` and one call `gen(...)` "
            f"over [batch, ...] tensors of its arguments per 256 samples{back}"
        )
    else:
        fn = "make_sample"
        fix = (
            "move the loop body into a function of one sample (`def make_sample(i, ...)`, returning its "
            "tensors) and batch it with trainmedic.batch: `gen = batch.vectorize(make_sample)` and one "
            f"call `gen(...)` per 256 samples{back}"
        )
    return (
        f"{loop.over} (line {loop.node.lineno}) makes one sample per iteration on the GPU "
        f"({' and '.join(evidence)}): every sample pays {costs}, too small to keep the GPU busy "
        f"(a generator making 10k samples this way made 70,000 single-sample GPU calls and kept the GPU 28 % busy); {fix}, or "
        f"`batch.generate({fn}, params, out=...)` for a generation job (typically 8-10x)"
    )


RULE = Rule(
    code="TM113",
    name="per-sample-generation",
    summary=(
        "A loop that makes one sample per iteration on the GPU (small device ops or a copy back per "
        "sample, no model in it)."
    ),
    why=(
        "Every kernel launch and every copy between host and GPU has a fixed cost (tens of\n"
        "microseconds) that one small sample cannot amortise: a loop that makes a 7 x 1024 IQ sample\n"
        "per iteration spends its time launching kernels and waiting for copies, not computing.\n"
        "10k synthetic IQ samples generated one at a time on the GPU made 70,000 single-sample GPU\n"
        "calls, kept the GPU 28 % busy and took 400-600 s; 256 samples per batched call with one copy back took\n"
        "40-80 s (8-10x). trainmedic.batch measured the same generator at 16.9x batched against the\n"
        "per-sample loop on a 2-core CPU (64 IQ samples a receiver; 5.5x at 128)."
    ),
    fix=(
        "Write the loop body as a function of one sample (its arguments: the per-sample parameters;\n"
        "random draws from an `rng` argument) and batch it with trainmedic.batch:\n"
        "`gen = batch.vectorize(make_sample)`, then one call `gen(...)` over [batch, ...] tensors of\n"
        "the parameters (torch.func.vmap runs the function's own code once over the whole batch), and\n"
        "copy the result back once; `batch.generate(make_sample, params, out=...)` runs a whole\n"
        "generation job in calls sized to the GPU's memory, with resumable shards."
    ),
    before="""
import math

import torch

device = torch.device("cuda")

def make_dataset(freqs, snrs):
    samples = []
    for i in range(len(freqs)):
        t = torch.arange(1024, device=device) / 2e5
        x = torch.exp(2j * math.pi * freqs[i] * t)
        x = x + torch.randn(1024, dtype=torch.cfloat, device=device) * 10 ** (-snrs[i] / 20)
        samples.append(x.cpu())
    return torch.stack(samples)
""",
    after="""
import math

import torch

from trainmedic import batch

def make_sample(freq, snr_db, rng):
    t = torch.arange(1024, device=freq.device) / 2e5
    x = torch.exp(2j * math.pi * freq * t)
    return x + rng.complex_normal((1024,)) * 10 ** (-snr_db / 20)

gen = batch.vectorize(make_sample)

def make_dataset(freqs, snrs):
    return gen(freq=freqs, snr_db=snrs, seed=0).cpu()
""",
    check=check,
    not_fixable=(
        "batching turns the loop body into a function of one sample called once per batch; write it with "
        "trainmedic.batch.vectorize by hand"
    ),
)
