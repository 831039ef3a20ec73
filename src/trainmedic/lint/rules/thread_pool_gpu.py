"""TM112: a thread pool that runs GPU work one sample per task."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence

from trainmedic.lint.context import LOOPS, SCOPES, Function, ModuleContext
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import (
    argument,
    bound_names,
    keyword,
    names_a_gpu,
    names_bound_in,
    names_in,
    words_in,
)

#: Thread pools only: a process pool gives each worker its own CUDA context, another problem.
_THREAD_POOLS = frozenset(
    {
        "concurrent.futures.ThreadPoolExecutor",
        "concurrent.futures.thread.ThreadPoolExecutor",
        "multiprocessing.pool.ThreadPool",
        "multiprocessing.dummy.Pool",
    }
)
#: One task per call: a loop around the call makes one task per item.
_SUBMIT = frozenset({"submit", "apply_async", "apply"})
#: One task per item of the iterable, no loop needed (its position in the call: 1).
_MAP = frozenset({"map", "imap", "imap_unordered", "starmap", "map_async", "starmap_async"})
#: How deep the submitted function's own calls are followed into the module's functions.
_DEPTH = 2
#: A loop or map over these hands each GPU, process, epoch or experiment a task of its own:
#: one thread per GPU, or a sweep of whole runs, is not per-sample work.
_NOT_SAMPLES = re.compile(
    r"device|gpu|cuda|rank|world|epoch|fold|config|cfg|experiment|trial|sweep|hparam|model", re.IGNORECASE
)
_SAMPLES = re.compile(r"sample|example|signal|image|item|record|row", re.IGNORECASE)
#: torch.cuda calls that ask about the GPU without running anything on it.
_CUDA_QUERIES = frozenset(
    {
        "is_available",
        "device_count",
        "get_device_name",
        "get_device_properties",
        "current_device",
        "get_device_capability",
        "is_initialized",
        "mem_get_info",
        "memory_allocated",
        "memory_reserved",
    }
)
_LOADER_NAME = re.compile(r"loader", re.IGNORECASE)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _thread_pools(context: ModuleContext) -> dict[str, ast.Call]:
    """Names and ``self.attrs`` bound to a thread pool (``with ThreadPoolExecutor(...) as ex``,
    ``self.pool = ThreadPool(8)``), each with the call that built it; a name also built from
    another call in the module (a process pool) is left out. ``self.pool = None`` is not a call."""
    pools: dict[str, ast.Call] = {}
    other: set[str] = set()
    for node in context.nodes(ast.withitem, ast.Assign):
        value = node.context_expr if isinstance(node, ast.withitem) else node.value
        if not isinstance(value, ast.Call):
            continue
        targets = [node.optional_vars] if isinstance(node, ast.withitem) else node.targets
        for name in (ast.unparse(t) for t in targets if isinstance(t, (ast.Name, ast.Attribute))):
            if _is_thread_pool(context, value):
                pools.setdefault(name, value)
            else:
                other.add(name)
    return {name: built for name, built in pools.items() if name not in other}


def _is_thread_pool(context: ModuleContext, expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Call) and context.qualname(expr.func) in _THREAD_POOLS


def _pool_call(context: ModuleContext, call: ast.Call, pools: dict[str, ast.Call]) -> ast.Call | None:
    """The call that built the pool of ``ex.submit(...)`` / ``pool.map(...)``, or of
    ``ThreadPool(8).map(...)``; None when the call is not a thread pool's."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _SUBMIT | _MAP or not call.args:
        return None
    if isinstance(func.value, ast.Call) and _is_thread_pool(context, func.value):
        return func.value
    if isinstance(func.value, (ast.Name, ast.Attribute)):
        return pools.get(ast.unparse(func.value))
    return None


def _task(context: ModuleContext, expr: ast.AST) -> tuple[str | None, Sequence[ast.Lambda | Function]]:
    """(the callable as written, None for a lambda; the module's functions or the lambda it runs)."""
    if isinstance(expr, ast.Lambda):
        return None, [expr]
    if isinstance(expr, ast.Call) and (context.qualname(expr.func) or "").endswith("partial") and expr.args:
        return _task(context, expr.args[0])  # functools.partial(fn, ...) runs fn
    if isinstance(expr, (ast.Name, ast.Attribute)):
        return ast.unparse(expr), context.calls_local_function(ast.Call(func=expr, args=[], keywords=[]))
    return ast.unparse(expr), []


def _gpu_call(context: ModuleContext, call: ast.Call) -> bool:
    """A call that runs on the GPU or puts data there: cupy, ``.cuda()``, ``.to(device)``,
    ``device="cuda"``, torch.cuda work (not its queries)."""
    qualname = context.qualname(call.func) or ""
    if qualname.startswith(("cupy.", "cupyx.", "numba.cuda.")):
        return True
    if qualname.startswith("torch.cuda.") and qualname.rsplit(".", 1)[-1] not in _CUDA_QUERIES:
        return True
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "cuda":
        return True
    if isinstance(func, ast.Attribute) and func.attr == "to":
        device = keyword(call, "device") or (call.args[0] if call.args else None)
        if device is not None and names_a_gpu(device):
            return True
    device = keyword(call, "device")
    return device is not None and names_a_gpu(device)


def _gpu_work(context: ModuleContext, functions: Sequence[ast.AST]) -> ast.Call | None:
    """The first GPU call the task makes, in it or in the module's functions it calls (up to
    ``_DEPTH`` calls deep). None as well for a task that trains (an optimizer step or backward in
    reach) or iterates a loader: a whole run or a whole dataset per task, not a sample."""
    seen, level, found = set(functions), list(functions), None
    for depth in range(_DEPTH + 1):
        callees: list[ast.AST] = []
        for function in level:
            if function in context.training_functions or function in context.step_functions:
                return None
            for node in sorted(context.walk_scope(function), key=_position):
                if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and any(
                    _LOADER_NAME.search(word) for word in words_in(node.iter, strings=True)
                ):
                    return None
                if not isinstance(node, ast.Call):
                    continue
                if node in context.step_markers:
                    return None
                if found is None and _gpu_call(context, node):
                    found = node
                if depth < _DEPTH:
                    callees.extend(f for f in context.calls_local_function(node) if f not in seen)
        seen.update(callees)
        level = callees
    return found


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def _per_item(context: ModuleContext, call: ast.Call, method: str) -> str | None:
    """Where the pool gets one task per sample: a map over items, or a submit in a loop (or a
    comprehension) whose iterations submit different arguments. None when the items are GPUs,
    epochs, folds or experiments."""
    if method in _MAP:
        items = argument(call, 1, "iterable")
        if items is None or not _samples(list(words_in(items, strings=True))):
            return None
        return f"over `{ast.unparse(items)}`"
    submitted = [*call.args[1:], *(kw.value for kw in call.keywords)]
    child: ast.AST = call
    for ancestor in context.ancestors(call):
        if isinstance(ancestor, SCOPES) or ancestor in context.step_loops:
            return None  # a training loop submits once per step, not once per sample
        if isinstance(ancestor, _COMPREHENSIONS) and child not in ancestor.generators:
            loop, iterable, fresh = "comprehension", ancestor.generators[0].iter, set()
            for generator in ancestor.generators:
                fresh |= bound_names(generator.target)
        elif isinstance(ancestor, LOOPS) and any(child is s for s in ancestor.body):
            loop = "loop"
            iterable = ancestor.test if isinstance(ancestor, ast.While) else ancestor.iter
            fresh = bound_names(ancestor.target) if not isinstance(ancestor, ast.While) else set()
            fresh |= names_bound_in(ancestor)
        else:
            child = ancestor
            continue
        varies = any(names_in(arg) & fresh for arg in submitted)
        if varies and _samples([*words_in(iterable, strings=True), *fresh]):
            if isinstance(ancestor, ast.While):
                return f"in the `while {ast.unparse(iterable)}` loop (line {ancestor.lineno})"
            return f"in the {loop} over `{ast.unparse(iterable)}` (line {ancestor.lineno})"
        child = ancestor
    return None


def _samples(words: list[str]) -> bool:
    """The words of a loop or map's items do not name GPUs, epochs or experiments, or they say
    samples anyway (``sample_configs``)."""
    if any(_SAMPLES.search(word) for word in words):
        return True
    return not any(_NOT_SAMPLES.search(word) for word in words)


def _threads(built: ast.Call) -> str:
    """ "72 threads" when the pool was built with a literal size, else "a thread pool"."""
    size = argument(built, 0, "max_workers") or keyword(built, "processes")
    if isinstance(size, ast.Constant) and isinstance(size.value, int):
        return f"{size.value} threads"
    return "a thread pool"


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    # Most files import no pool at all: skip them before looking at a single call.
    if not any(module.startswith(("concurrent", "multiprocessing")) for module in context.imports.values()):
        return
    pools = _thread_pools(context)
    for call in context.nodes(ast.Call):
        pool = _pool_call(context, call, pools)
        if pool is None:
            continue
        assert isinstance(call.func, ast.Attribute)  # _pool_call found a method of a pool
        method = call.func.attr
        name, functions = _task(context, call.args[0])
        if not functions:
            continue  # a function of another module: its body cannot be read here
        where = _per_item(context, call, method)
        if where is None:
            continue
        gpu = _gpu_work(context, functions)
        if gpu is None:
            continue
        fn = name or "<per_sample_fn>"
        yield (
            call,
            (
                f"{ast.unparse(call.func)}({name or 'lambda'}, ...) {where} runs "
                f"{f'{name}()' if name else 'the lambda'} (line {functions[0].lineno}) once per sample on "
                f"{_threads(pool)}, and it does GPU work (`{_short(gpu)}` at line {gpu.lineno}): "
                "tiny GPU calls, one sample at a time, whose launches serialize on one device however many "
                "threads make them (measured: GPU 28 % busy); batch it with trainmedic.batch: "
                f"`gen = batch.vectorize({fn})` and one call per 256 samples, or "
                f"`batch.generate({fn}, params, out=...)` for a generation job (typically 8-10x)"
            ),
        )


def _short(call: ast.Call) -> str:
    text = ast.unparse(call)
    return text if len(text) <= 60 else ast.unparse(call.func) + "(...)"


RULE = Rule(
    code="TM112",
    name="per-sample-gpu-thread-pool",
    summary="A thread pool that submits GPU work one sample per task (submit in a loop, map over samples).",
    why=(
        "Threads do not make a GPU busier: every task's kernels and copies go through one device,\n"
        "and a task that makes one small sample launches kernels too short to amortise their fixed\n"
        "cost (tens of microseconds each), while the threads contend for the GIL and the CUDA\n"
        "context in between. Synthetic RF samples generated by\n"
        "ThreadPoolExecutor(max_workers=72), one sample per task, made 70,000 tiny GPU operations\n"
        "and copies, kept the GPU 28 % busy and took 400-600 s; 256 samples per batched GPU call\n"
        "with one copy back took 40-80 s (8-10x)."
    ),
    fix=(
        "Batch the per-sample function instead of threading it, with trainmedic.batch:\n"
        "`gen = batch.vectorize(fn)`, then one call `gen(...)` over [batch, ...] tensors of the\n"
        "parameters (256 samples per call), or `batch.generate(fn, params, out=...)` for a whole\n"
        "generation job (chunks, progress, Ctrl+C, resumable shards). Random draws come from the\n"
        "function's `rng` argument (batch.Rng), so the batched run reproduces the per-sample one.\n"
        "Thread pools stay fine for file I/O, downloads and CPU work that releases the GIL."
    ),
    before="""
from concurrent.futures import ThreadPoolExecutor, as_completed

import torch

def generate_sample(freq, snr_db):
    t = torch.arange(1024, device="cuda") / 1e6
    signal = torch.exp(2j * torch.pi * freq * t)
    noise = torch.randn(1024, dtype=torch.cfloat, device="cuda") * 10 ** (-snr_db / 20)
    return (signal + noise).cpu()

with ThreadPoolExecutor(max_workers=72) as executor:
    futures = [executor.submit(generate_sample, f, s) for f, s in zip(freqs, snrs)]
    samples = [future.result() for future in as_completed(futures)]
""",
    after="""
import torch

from trainmedic import batch

def generate_sample(freq, snr_db, rng):
    t = torch.arange(1024, device=freq.device) / 1e6
    signal = torch.exp(2j * torch.pi * freq * t)
    noise = rng.complex_normal((1024,)) * 10 ** (-snr_db / 20)
    return signal + noise

# One batched GPU call per chunk (batch_size="auto": as many samples as fit), shards saved as they finish.
batch.generate(generate_sample, {"freq": freqs, "snr_db": snrs}, out="shards/", seed=0)
""",
    check=check,
    not_fixable=(
        "batching the per-sample work changes the function's interface; wrap it with trainmedic.batch.vectorize by hand"
    ),
)
