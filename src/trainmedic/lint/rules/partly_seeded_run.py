"""TM208: a training script that seeds some random generators and draws from one it never seeds."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixing import text_of
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import keyword, last_name, words_in


@dataclass(frozen=True)
class Source:
    """A global random generator: what users call it, how to seed it, and a seeded alternative."""

    name: str
    seed_call: str
    own_generator: str


TORCH = Source(
    "PyTorch's global generator", "torch.manual_seed(seed)", "a torch.Generator().manual_seed(seed)"
)
NUMPY = Source("NumPy's global generator", "np.random.seed(seed)", "np.random.default_rng(seed)")
PYTHON = Source("Python's `random` module", "random.seed(seed)", "random.Random(seed)")
TENSORFLOW = Source("TensorFlow's global seed", "tf.random.set_seed(seed)", "an op seed (seed=...)")
EVERY = (TORCH, NUMPY, PYTHON, TENSORFLOW)

#: Calls that seed one global generator.
_SEEDS = {
    "torch.manual_seed": TORCH,
    "torch.random.manual_seed": TORCH,
    # Seeding only the device generators still says the run is meant to repeat; counting them as
    # torch's keeps a script that seeds CUDA alone from being flagged for torch.rand on the host.
    "torch.cuda.manual_seed": TORCH,
    "torch.cuda.manual_seed_all": TORCH,
    "numpy.random.seed": NUMPY,
    "random.seed": PYTHON,
    "tensorflow.random.set_seed": TENSORFLOW,
    "tensorflow.set_random_seed": TENSORFLOW,
    "tensorflow.compat.v1.set_random_seed": TENSORFLOW,
    "tensorflow.random.set_random_seed": TENSORFLOW,
}
#: Names that query or build a generator rather than seed the global one.
_NOT_SEEDING = re.compile(r"^(initial_seed|get_seed|default_rng|SeedSequence|seed_worker)$")
#: A Hugging Face Trainer seeds random, NumPy and torch itself (TrainingArguments.seed).
_SEEDING_TRAINER = re.compile(r"^transformers\.(\w+\.)*\w*Trainer$")

_TORCH_DRAWS = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "randperm",
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "multinomial",
        "normal",
        "poisson",
    }
)
_TORCH_INITS = frozenset(
    {
        "uniform_",
        "normal_",
        "trunc_normal_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "orthogonal_",
        "sparse_",
    }
)
#: Tensor methods that fill a tensor in place from torch's generator (``w.data.normal_(0, 0.02)``).
_TENSOR_FILLS = frozenset(
    {"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "cauchy_", "log_normal_", "geometric_"}
)
_NUMPY_DRAWS = frozenset(
    """rand randn randint random random_sample ranf sample choice shuffle permutation bytes normal
    uniform beta binomial chisquare dirichlet exponential f gamma geometric gumbel hypergeometric
    laplace logistic lognormal logseries multinomial multivariate_normal negative_binomial
    noncentral_chisquare noncentral_f pareto poisson power random_integers rayleigh standard_cauchy
    standard_exponential standard_gamma standard_normal standard_t triangular vonmises wald weibull
    zipf""".split()
)
_PYTHON_DRAWS = frozenset(
    """random randint randrange choice choices shuffle sample uniform gauss normalvariate triangular
    betavariate expovariate gammavariate lognormvariate vonmisesvariate paretovariate weibullvariate
    getrandbits randbytes""".split()
)
_TENSORFLOW_DRAWS = frozenset(
    {"normal", "uniform", "truncated_normal", "shuffle", "categorical", "gamma", "poisson", "random_normal"}
)
#: A draw whose value names a run, picks a port or a seed: it does not change what is trained.
_INCIDENTAL = re.compile(
    r"port|addr|host|name|tag|uuid|run_?id|exp_?id|colou?r|dir|path|file|seed|wandb", re.IGNORECASE
)
_FRAMEWORKS = ("keras", "tensorflow", "lightning", "pytorch_lightning")


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    if not _trains(context):
        return
    seeded = _seeded(context)
    if not seeded or seeded.keys() >= set(EVERY):
        return
    draws: dict[Source, list[tuple[ast.Call, str]]] = {}
    for call in context.nodes(ast.Call):
        found = _draw(context, call)
        if found is None or found[0] in seeded or _incidental(context, call):
            continue
        if found[0] in (NUMPY, PYTHON) and _seeded_in_workers(context, call, TORCH in seeded):
            continue
        draws.setdefault(found[0], []).append((call, found[1]))
    line_of_seed = min(call.lineno for call in seeded.values())
    what_is_seeded = " and ".join(source.name for source in EVERY if source in seeded)
    for source, from_it in draws.items():
        (call, what), *others = from_it
        more = ""
        if others:
            lines = ", ".join(str(other.lineno) for other, _ in others[:5])
            more = f" ({len(others)} more draw{'s' if len(others) > 1 else ''} from it: line {lines}"
            more += ", ..." if len(others) > 5 else ""
            more += ")"
        yield (
            call,
            (
                f"{what} draws from {source.name}, which this script never seeds, while it seeds "
                f"{what_is_seeded} (line {line_of_seed}){more}: two runs with the same seed differ; "
                f"seed it too ({source.seed_call}) or draw from {source.own_generator}"
            ),
        )


def _trains(context: ModuleContext) -> bool:
    """A backward pass or optimizer step in the file, or a framework's ``fit``."""
    if context.step_markers or context.step_functions:
        return True
    if not any(module.split(".")[0] in _FRAMEWORKS for module in context.imports.values()):
        return False
    return any(
        isinstance(call.func, ast.Attribute) and call.func.attr == "fit" for call in context.nodes(ast.Call)
    )


def _seeded(context: ModuleContext) -> dict[Source, ast.Call]:
    """Each global generator some call in the file seeds, with the first such call. A helper this
    file cannot see into (``seed_everything``, ``utils.set_seed``) is taken to seed them all."""
    seeded: dict[Source, ast.Call] = {}
    for call in context.nodes(ast.Call):
        for source in _sources_seeded_by(context, call):
            seeded.setdefault(source, call)
    return seeded


def _sources_seeded_by(context: ModuleContext, call: ast.Call) -> tuple[Source, ...]:
    qualname = _imported_qualname(context, call.func)
    if qualname in _SEEDS:
        # random.seed() and np.random.seed(None) reseed from the clock: the opposite of a seed.
        given = call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
        if given is None or (isinstance(given, ast.Constant) and given.value is None):
            return ()
        return (_SEEDS[qualname],)
    if qualname is not None and _SEEDING_TRAINER.match(qualname):
        return EVERY
    if qualname is not None and qualname.split(".")[0] in ("torch", "numpy", "random", "tensorflow"):
        return ()  # torch.seed(), torch.initial_seed(): these libraries seed only as listed above
    name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    name = call.func.id if isinstance(call.func, ast.Name) else name
    if "seed" not in name.lower() or _NOT_SEEDING.match(name) or context.calls_local_function(call):
        return ()  # a local helper's own seeding calls are counted where they are
    if isinstance(call.func, ast.Attribute) and qualname is None:
        # ``g.manual_seed(0)``, ``env.seed(0)``, ``rng.seed(1)``: an object's own generator.
        return ()
    return EVERY


def _imported_qualname(context: ModuleContext, func: ast.AST) -> str | None:
    """The dotted name of a call to an imported module's function; None for a local object's."""
    head = func
    while isinstance(head, ast.Attribute):
        head = head.value
    if not isinstance(head, ast.Name) or head.id not in context.imports:
        return None
    return context.qualname(func)


def _draw(context: ModuleContext, call: ast.Call) -> tuple[Source, str] | None:
    """The global generator a call draws from, and the call as the message names it."""
    if keyword(call, "generator") is not None:
        return None
    qualname = _imported_qualname(context, call.func) or ""
    if qualname in ("torch.utils.data.DataLoader", "torch.utils.data.random_split"):
        return _torch_data_draw(call, qualname)
    source = _source_drawn_from(context, call, qualname)
    return None if source is None else (source, f"{text_of(context, call.func)}()")


def _source_drawn_from(context: ModuleContext, call: ast.Call, qualname: str) -> Source | None:
    module, _, function = qualname.rpartition(".")
    if (module == "torch" and function in _TORCH_DRAWS) or (
        module == "torch.nn.init" and function in _TORCH_INITS
    ):
        return TORCH
    if module == "numpy.random" and function in _NUMPY_DRAWS:
        return NUMPY
    if module == "random" and function in _PYTHON_DRAWS:
        return PYTHON
    if module in ("tensorflow.random", "tensorflow") and function in _TENSORFLOW_DRAWS:
        return TENSORFLOW if keyword(call, "seed") is None else None
    if (
        isinstance(call.func, ast.Attribute)
        and call.func.attr in _TENSOR_FILLS
        and not qualname
        and "torch" in {module.split(".")[0] for module in context.imports.values()}
    ):
        return TORCH
    return None


def _torch_data_draw(call: ast.Call, qualname: str) -> tuple[Source, str] | None:
    if qualname.endswith("random_split"):
        return (TORCH, "random_split()") if len(call.args) < 3 else None
    shuffle = keyword(call, "shuffle")
    if isinstance(shuffle, ast.Constant) and shuffle.value is True and keyword(call, "sampler") is None:
        return TORCH, "DataLoader(shuffle=True)"
    return None


def _seeded_in_workers(context: ModuleContext, call: ast.Call, torch_seeded: bool) -> bool:
    """A draw in a Dataset (or a helper it calls) that DataLoader workers may run: each worker
    seeds `random` and NumPy from the loader's generator, so a seeded torch (or a loader given a
    ``generator=``) seeds them too. Only loaders that all visibly run in the main process
    (no ``num_workers``, or 0) leave such a draw unseeded."""
    if not _in_dataset(context, call):
        return False
    loaders = [
        c
        for c in context.nodes(ast.Call)
        if _imported_qualname(context, c.func) == "torch.utils.data.DataLoader"
    ]
    if not loaders:
        return True  # the loader is built elsewhere: its workers are unknown
    if any(keyword(loader, "generator") is not None for loader in loaders):
        return True
    return torch_seeded and not all(_main_process_only(loader) for loader in loaders)


def _main_process_only(loader: ast.Call) -> bool:
    if any(kw.arg is None for kw in loader.keywords) or len(loader.args) > 5:
        return False  # **kwargs, or num_workers given by position
    workers = keyword(loader, "num_workers")
    return workers is None or (isinstance(workers, ast.Constant) and workers.value == 0)


def _in_dataset(context: ModuleContext, call: ast.Call) -> bool:
    """Inside a class that serves samples (``__getitem__``, ``__iter__``, a ``*Dataset`` base),
    or in a function such a class calls."""
    pending: list[ast.AST] = [call]
    seen: set[ast.AST] = set()
    while pending:
        node = pending.pop()
        owner = context.class_of(node)
        if owner is not None and _serves_samples(owner):
            return True
        function = context.function_of(node)
        if function is not None and function not in seen:
            seen.add(function)
            pending.extend(context.callers(function))
    return False


def _serves_samples(cls: ast.ClassDef) -> bool:
    methods = {node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    bases = [last_name(base) or "" for base in cls.bases]
    return bool(methods & {"__getitem__", "__iter__"}) or any(base.endswith("Dataset") for base in bases)


def _incidental(context: ModuleContext, call: ast.Call) -> bool:
    """A draw that only names the run or picks a port (``port = random.randint(...)``)."""
    statement = next((a for a in context.ancestors(call) if isinstance(a, ast.stmt)), None)
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return any(_INCIDENTAL.search(word) for target in targets for word in words_in(target, strings=True))
    return False


RULE = Rule(
    code="TM208",
    name="partly-seeded-run",
    summary="The script seeds some random generators but draws from one it never seeds.",
    why=(
        "Seeding torch does not seed NumPy or Python's `random`, and seeding NumPy does not seed\n"
        "torch: each keeps its own global state. A script that calls torch.manual_seed(0) and then\n"
        "augments with np.random, shuffles with random.shuffle or initialises weights while only\n"
        "NumPy is seeded looks reproducible and is not: two runs with the same seed see different\n"
        "data orders, crops or initial weights, so their losses differ, a comparison between two\n"
        "settings measures noise as well, and a failure seen once cannot be replayed."
    ),
    fix=(
        "Seed every generator the script draws from, in one helper called at start-up\n"
        "(random.seed, np.random.seed and torch.manual_seed with the same value, or Lightning's\n"
        "seed_everything / transformers.set_seed), or draw from generators made with an explicit\n"
        "seed: np.random.default_rng(seed), random.Random(seed), torch.Generator().manual_seed(seed).\n"
        "A script that seeds nothing is not flagged: it does not claim to repeat. Nor is a draw in a\n"
        "Dataset that DataLoader workers run: each worker seeds `random` and NumPy from torch's seed."
    ),
    before="""
import numpy as np
import torch

torch.manual_seed(0)
for x, y in loader:
    x = x + torch.from_numpy(np.random.normal(0, 0.1, x.shape)).float()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
    after="""
import numpy as np
import torch

torch.manual_seed(0)
rng = np.random.default_rng(0)
for x, y in loader:
    x = x + torch.from_numpy(rng.normal(0, 0.1, x.shape)).float()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
    check=check,
    not_fixable=(
        "which seed the other generator takes (the same value, one per rank, a --seed flag) and where "
        "it is set are the script's choice"
    ),
)
