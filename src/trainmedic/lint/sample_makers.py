"""What makes a sample on the GPU in one iteration of a loop over samples: library calls that run
on the GPU (a factory with ``device=`` a GPU, cupy, torch.cuda work), random draws, copies to the
GPU and back, and the user's own generator functions (``generate_iq_sample``) with what the
module's functions they reach do; and what rules a loop out: a model run, trained or built, a
network's own code, a test's inputs, a vectorized call, a large tensor. What TM113 reports, and
what TM108 asks of a loop that moves a generated sample to the GPU.
"""

from __future__ import annotations

import ast
import builtins
import math
import re

from trainmedic.lint.context import Function, ModuleContext
from trainmedic.lint.sample_loops import calls_in, kept_values, making, path_words, sample_loop
from trainmedic.lint.syntax import (
    keyword,
    last_name,
    names_a_gpu,
    names_in,
    source_order,
    words_in,
)

#: A per-iteration tensor of at least this many elements is not a small op.
_LARGE_ELEMENTS = 1 << 20
_CUDA_QUERIES = frozenset(
    "is_available device_count get_device_name get_device_properties current_device "
    "get_device_capability is_initialized mem_get_info memory_allocated memory_reserved synchronize".split()
)
#: Calls that run a network: per-sample inference or training is another problem with another fix.
_MODEL_WORD = re.compile(
    r"^(model|net|network|encoder|decoder|classifier|backbone|discriminator|critic|policy|actor|agent|"
    r"unet|vae|transformer|gpt|bert|llm|pipe|pipeline|ema|teacher|student)|(^|_)(model|net|encoder|decoder)s?$|"
    r"^net[A-Z_]",
    re.IGNORECASE,
)
#: Methods that run a network (``x.generate(...)``, ``self.forward(...)``), or a solver or a job
#: per item (``worker.run()``, lobpcg's per-matrix loop): not a handful of ops. Plain functions
#: of these names (the user's ``generate(params)``) are not meant.
_MODEL_METHOD = re.compile(
    r"^(forward|predict|predict_step|infer|inference|generate|sample|decode|encode|"
    r"run|solve|fit|fit_transform|optimize|minimize|train|evaluate)$"
)
#: Libraries whose functions are not the user's own per-sample function.
_LIBRARIES = ("torch.", "numpy.", "cupy.", "cupyx.", "math.", "random.", "scipy.", "jax.", "tqdm.", "time.")
_TEST_FUNCTION = re.compile(r"^test|(^|_)inputs(_|$)")
_NETWORK_BASE = re.compile(r"Module$|^Layer$|^Model$|Network$|^Sequential$")
_VECTORIZERS = re.compile(r"(^|\.)(vectorize|vmap)$")
#: torch's random draws: new data each call, the mark of a generator.
_TORCH_DRAWS = frozenset(
    "rand randn randint rand_like randn_like randint_like normal bernoulli poisson multinomial randperm".split()
)
_INPLACE_DRAWS = frozenset(
    "normal_ uniform_ exponential_ random_ bernoulli_ cauchy_ log_normal_ geometric_".split()
)
#: Draws of a random generator object: ``rng.normal(...)``, ``self.rng.integers(...)``, ``rng.complex_normal``.
_RNG_METHODS = frozenset(
    "normal uniform standard_normal integers random choice rayleigh exponential poisson randn rand "
    "randint complex_normal permutation beta gamma binomial lognormal".split()
)
_RNG_NAME = re.compile(r"rng|random|generator|^gen$|^g$", re.IGNORECASE)
#: Names of the user's functions that make samples.
_MAKER_NAME = re.compile(r"gen|make|synth|simul|render|creat|draw|sampl|emit", re.IGNORECASE)
#: How deep a called function's own calls are followed into the module's functions.
_DEPTH = 2
_BUILTINS = frozenset(dir(builtins))


def generated_sample(
    context: ModuleContext, node: ast.AST, transfer: ast.Call, moved: ast.expr
) -> tuple[str, str] | None:
    """For TM108: when ``node`` (a loop or comprehension) iterates samples, keeps one per iteration
    through ``transfer``, and ``moved`` is made in the iteration by the user's own generator
    function from the loop's variables (``make_np(i)``, ``generate_iq_sample(params[i])``): the
    loop as messages name it, and that function."""
    loop = sample_loop(context, node)
    if loop is None or node in context.step_loops or in_a_network(context, node):
        return None
    if any(call in context.step_markers or runs_a_model(context, call) for call in calls_in(loop.body)):
        return None
    kept, carried = making(loop, kept_values(context, loop))
    if carried or transfer not in calls_in(kept):
        return None
    fresh = loop.changing
    device = keyword(transfer, "device") or (transfer.args[0] if transfer.args else None)
    if isinstance(device, ast.Attribute) and names_in(device.value) & fresh:
        return None  # .to(x.device): to where this iteration's data already is
    for call in calls_in(making(loop, [moved])[0]):
        name = user_function(context, call)
        if name is not None and named_as_maker(call) and names_in(call) & fresh:
            return f"{loop.over} (line {loop.node.lineno})", name
    return None


def runs_on_gpu(
    context: ModuleContext, call: ast.Call, fresh: frozenset[str] | set[str] = frozenset()
) -> bool:
    """A library call that runs on the GPU: torch's with ``device=`` a GPU, cupy, torch.cuda work
    (not its queries)."""
    qualname = context.qualname(call.func) or ""
    if qualname.startswith(("cupy.", "cupyx.")) and qualname not in ("cupy.asnumpy", "cupy.cuda.Device"):
        return True
    if qualname.startswith("torch.cuda.") and qualname.rsplit(".", 1)[-1] not in _CUDA_QUERIES:
        return True
    if not qualname.startswith(("torch.", "jax.")):
        return False  # the user's own make_sample(..., device=device): its body says, not its call
    device = keyword(call, "device")
    if device is None or not names_a_gpu(device):
        return False
    # device=image.device for this iteration's item: the device follows data that exists already.
    return not (isinstance(device, ast.Attribute) and names_in(device.value) & fresh)


def moves_to_gpu(call: ast.Call) -> bool:
    """``x.cuda()``, ``x.to(device)``: a copy of a value to the GPU."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "cuda" and not call.args:
        return True
    device = keyword(call, "device") or (call.args[0] if call.args else None)
    return func.attr == "to" and device is not None and names_a_gpu(device)


def copies_back(context: ModuleContext, call: ast.Call) -> bool:
    """``x.cpu()``, ``cp.asnumpy(x)``: a copy from the GPU back to the host."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "cpu" and not call.args:
        return True
    return context.qualname(func) == "cupy.asnumpy"


def copies_to_gpu(context: ModuleContext, call: ast.Call) -> bool:
    """``torch.tensor(x, device=device)``: a host-to-device copy of data made elsewhere (TM108's)."""
    return context.qualname(call.func) in ("torch.tensor", "torch.as_tensor", "cupy.asarray", "cupy.array")


def large_factory(context: ModuleContext, call: ast.Call) -> bool:
    """A factory whose literal shape holds a million elements or more: a few large ops per
    iteration keep the GPU busy, whatever the loop."""
    if not (context.qualname(call.func) or "").startswith(("torch.", "cupy.")):
        return False
    dims: list[int] = []
    for arg in call.args:
        elements = arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]
        for element in elements:
            if isinstance(element, ast.Constant) and isinstance(element.value, int) and element.value > 0:
                dims.append(element.value)
    return bool(dims) and math.prod(dims) >= _LARGE_ELEMENTS


def in_a_network(context: ModuleContext, node: ast.AST) -> bool:
    """Inside a method of an ``nn.Module``, a Lightning module or a Keras layer or model."""
    owner = context.class_of(node)
    return owner is not None and any(
        _NETWORK_BASE.search(word) for base in owner.bases for word in path_words(base)
    )


def builds_test_inputs(context: ModuleContext, node: ast.AST) -> bool:
    """In a test, or a function that builds test inputs (``sample_inputs_stack``): one tensor per
    case, shapes that differ, no throughput to lose."""
    function = context.function_of(node)
    return function is not None and bool(_TEST_FUNCTION.search(function.name))


def builds_a_network(context: ModuleContext, call: ast.Call) -> bool:
    """``nn.Linear(...)``, ``nn.Parameter(torch.randn(..., device=device))``: a model's parts."""
    qualname = context.qualname(call.func) or ""
    return qualname.startswith("torch.nn.") and not qualname.startswith("torch.nn.functional.")


def _library(context: ModuleContext, call: ast.Call) -> bool:
    qualname = context.qualname(call.func) or ""
    return qualname.startswith(_LIBRARIES) or qualname in _BUILTINS


def local_functions(context: ModuleContext, call: ast.Call) -> list[Function]:
    """The module's functions a call reaches for sure: ``make_sample(...)``, ``self._add_awgn(...)``;
    not ``x.clone()`` because some local class has a ``clone`` method."""
    func = call.func
    if isinstance(func, ast.Name) or (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in ("self", "cls")
    ):
        return context.calls_local_function(call)
    return []


def user_function(context: ModuleContext, call: ast.Call) -> str | None:
    """The call as written when it calls the user's own code: a function of this module
    (``make_sample``, ``self._add_awgn``) or a plain name imported from elsewhere
    (``generate_iq_sample``); None for library calls, builtins and methods of values."""
    if _library(context, call):
        return None
    if local_functions(context, call):
        return ast.unparse(call.func)
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        imported = context.imports.get(call.func.value.id)
        if imported is not None and not (context.qualname(call.func) or "").startswith(_LIBRARIES):
            return ast.unparse(call.func)  # helpers.make_sample(...)
    return None


def runs_a_model(context: ModuleContext, call: ast.Call) -> bool:
    """A training step, or a call of a network, a solver or a job (``model(x)``, ``x.generate()``)."""
    if call in context.step_markers:
        return True
    if _library(context, call):
        return False
    words = path_words(call.func)
    if isinstance(call.func, ast.Attribute) and _MODEL_METHOD.match(words[0]):
        return True
    return any(_MODEL_WORD.search(word) for word in words)


def vectorized_names(context: ModuleContext) -> set[str]:
    """Names bound to ``batch.vectorize(fn)`` or ``torch.vmap(fn)``: calls of them are batched."""
    return {
        name
        for node in context.nodes(ast.Assign)
        if isinstance(node.value, ast.Call) and _VECTORIZERS.search(context.qualname(node.value.func) or "")
        for name in (last_name(t) for t in node.targets)
        if name
    }


def vectorized(context: ModuleContext, call: ast.Call, names: set[str]) -> bool:
    """A call of a vectorized function: ``gen(...)`` with ``gen`` in ``names``, or ``torch.vmap(f)(...)``."""
    if isinstance(call.func, ast.Call):
        return bool(_VECTORIZERS.search(context.qualname(call.func.func) or ""))
    return last_name(call.func) in names


class CalleeFacts:
    """What the module's functions a call reaches do, ``_DEPTH`` calls deep: the first call that
    makes data on the GPU, whether they draw random numbers (on the GPU, or anywhere), and
    whether they run a model, train or read a DataLoader."""

    def __init__(self, gpu: ast.Call | None, draws_on_gpu: bool, draws: bool, model: bool):
        self.gpu, self.draws_on_gpu, self.draws, self.model = gpu, draws_on_gpu, draws, model


def callee_facts(context: ModuleContext, functions: list[Function], cache: dict) -> CalleeFacts:
    key = tuple(id(f) for f in functions)
    if key in cache:
        return cache[key]
    seen, level, gpu, model = set(functions), list(functions), None, False
    draws_on_gpu = draws = False
    for depth in range(_DEPTH + 1):
        callees: list[Function] = []
        ops: list[ast.Call] = []
        for function in level:
            if function in context.training_functions or function in context.step_functions:
                model = True
            for node in context.walk_scope(function):
                if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and any(
                    "loader" in word.lower() for word in words_in(node.iter)
                ):
                    model = True
                if not isinstance(node, ast.Call):
                    continue
                if runs_a_model(context, node):
                    model = True
                if gpu is None and runs_on_gpu(context, node):
                    ops.append(node)
                drawn = where_drawn(context, node)
                draws = draws or drawn is not None
                draws_on_gpu = draws_on_gpu or drawn == "gpu"
                if depth < _DEPTH:
                    callees.extend(f for f in local_functions(context, node) if f not in seen)
        gpu = gpu or earliest(ops)  # the called function's own first GPU call, else its helpers'
        seen.update(callees)
        level = callees
    cache[key] = CalleeFacts(gpu, draws_on_gpu, draws, model)
    return cache[key]


def where_drawn(context: ModuleContext, call: ast.Call, fresh: frozenset[str] = frozenset()) -> str | None:
    """Where a call draws random numbers: "gpu" (``torch.randn(..., device=device)``,
    ``cp.random.randn``), "host" for other draws (NumPy's, ``rng.normal``, ``x.normal_()``,
    ``torch.rand_like(x)``: new data either way), None for a call that draws nothing."""
    qualname = context.qualname(call.func) or ""
    if qualname.startswith("cupy.random."):
        return "gpu"
    if qualname.startswith("torch.") and qualname.rsplit(".", 1)[-1] in _TORCH_DRAWS:
        return "gpu" if runs_on_gpu(context, call, fresh) else "host"
    if qualname.startswith(("numpy.random.", "random.")):
        return "host"
    func = call.func
    if isinstance(func, ast.Attribute):
        if func.attr in _INPLACE_DRAWS:
            return "host"
        if func.attr in _RNG_METHODS and any(_RNG_NAME.search(w) for w in path_words(func.value)):
            return "host"
    return None


def earliest(calls: list[ast.Call]) -> ast.Call | None:
    """The first of the calls in source order."""
    return source_order(calls)[0] if calls else None


def named_as_maker(call: ast.Call) -> bool:
    """A call of a function named for making samples: ``generate_iq_sample``, ``make``, ``synthesize``."""
    return bool(_MAKER_NAME.search(last_name(call.func) or ""))
