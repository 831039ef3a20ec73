"""TM108: moving data to the GPU one sample at a time (in __getitem__, or in a loop over a batch)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from trainmedic.lint.context import LOOPS, SCOPES, Loop, ModuleContext
from trainmedic.lint.model import Rule
from trainmedic.lint.sample_makers import generated_sample
from trainmedic.lint.syntax import (
    argument,
    bound_names,
    keyword,
    last_name,
    names_bound_in,
    names_in,
    string_value,
)

_DEVICE_NAME = re.compile(r"device|^dev$|cuda|gpu|^(local_)?rank$", re.IGNORECASE)
_MODEL_NAME = re.compile(
    r"(^|_)(model|net|network|module|encoder|decoder|classifier|backbone)$", re.IGNORECASE
)
#: A count of samples: range(batch_size), range(n_samples).
_COUNT_NAME = re.compile(
    r"^(batch_?size|bs|bsz|(n|num)_?(samples?|examples?|data|points|images|items)|dataset_?size)$",
    re.IGNORECASE,
)
#: Collections of samples: for x in dataset, for s in samples, range(len(examples)), for i in indices.
_SAMPLES_NAME = re.compile(
    r"^(samples|examples|dataset|.+_dataset|dataset_.+|.+_samples|samples_.+|batch_?(items|samples|list)|"
    r"(batch_|sample_)?(ind(ices|exes)|idxs))$",
    re.IGNORECASE,
)
#: A batch is a list of samples only before collation (a collate_fn, random.sample of a replay
#: memory); a collated batch is a tuple or dict of fields: ``tuple(t.to(device) for t in batch)``.
_BATCH_NAME = re.compile(r"^(batch|mini_?batch)$", re.IGNORECASE)
#: Calls whose result iterates in batches: DataLoader, tf.data's .batch(n), np.array_split.
_BATCHER = re.compile(r"loader|^batch$|batches|split|chunk", re.IGNORECASE)
#: Calls that make data arrays (rows are samples), not value ranges like np.linspace.
_ARRAY_MAKERS = frozenset(
    {
        "load",
        "array",
        "asarray",
        "stack",
        "concatenate",
        "vstack",
        "from_numpy",
        "tensor",
        "as_tensor",
        "randn",
        "rand",
        "normal",
        "uniform",
        "memmap",
        "loadtxt",
        "genfromtxt",
        "fromfile",
        "frombuffer",
    }
)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_WRAPPERS = ("enumerate", "zip", "tqdm")


def _transfer(context: ModuleContext, call: ast.Call) -> tuple[str, ast.expr, ast.expr | None] | None:
    """(what the message calls it, the value moved, the device) for a host-to-device copy."""
    func, qualname = call.func, context.qualname(call.func) or ""
    if qualname in ("torch.tensor", "torch.as_tensor"):
        device, data = keyword(call, "device"), argument(call, 0, "data")
        if device is None or data is None or _is_cpu(device):
            return None
        return f"{qualname}(..., device={ast.unparse(device)})", data, device
    if qualname in ("cupy.asarray", "cupy.array") and call.args:
        return f"{qualname}()", call.args[0], None
    if not isinstance(func, ast.Attribute) or qualname.startswith("torch.cuda"):
        return None
    receiver = func.value
    moving = receiver.func if isinstance(receiver, ast.Call) else receiver
    if _MODEL_NAME.search(last_name(moving) or ""):
        return None  # moving a model (or model.float()) is not moving data
    if func.attr == "cuda" and not call.args:
        return f"{ast.unparse(receiver)}.cuda()", receiver, None
    device = keyword(call, "device") or (call.args[0] if call.args else None)
    if func.attr == "to" and device is not None and not _is_cpu(device) and _names_device(device):
        return f"{ast.unparse(receiver)}.to({ast.unparse(device)})", receiver, device
    return None


def _is_cpu(device: ast.AST) -> bool:
    if isinstance(device, ast.Call) and last_name(device.func) == "device" and device.args:
        device = device.args[0]
    return (string_value(device) or "").startswith("cpu")


def _names_device(device: ast.AST) -> bool:
    """``device``, ``self.device``, ``"cuda:0"``, ``torch.device(...)``; not ``torch.float16``."""
    if isinstance(device, ast.Call):
        return last_name(device.func) == "device"
    text = string_value(device)
    if text is not None:
        return bool(re.match(r"(cuda|gpu|mps|xpu)", text, re.IGNORECASE))
    return bool(_DEVICE_NAME.search(last_name(device) or ""))


def _in_getitem(context: ModuleContext, call: ast.Call, moved: ast.AST, device: ast.AST | None) -> str | None:
    function, owner = context.function_of(call), context.class_of(call)
    if function is None or function.name != "__getitem__" or owner is None:
        return None
    # A Dataset's items are samples; other containers' __getitem__ may hand out fields or batches.
    if "Dataset" not in owner.name and not any("Dataset" in (last_name(b) or "") for b in owner.bases):
        return None
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(owner):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and last_name(target.value) == "self":
                    assigned.setdefault(target.attr, []).append(node.value)
    if isinstance(device, ast.Attribute) and last_name(device.value) == "self":
        values = assigned.get(device.attr, [])
        if values and all(_is_cpu(v) for v in values):
            return None  # self.device = "cpu" wherever the class sets it
    # A GPU-cached dataset: self.x was moved in __init__, so self.x[i].to(device) is a no-op.
    on_device = {
        attr
        for attr, values in assigned.items()
        if any(_transfer(context, n) or _made_on_device(context, n) for v in values for n in _calls(v))
    }
    if _self_attributes(context, function, moved) & on_device:
        return None
    return f"inside {owner.name}.__getitem__"


def _calls(expr: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(expr) if isinstance(n, ast.Call)]


def _made_on_device(context: ModuleContext, node: ast.Call) -> bool:
    if not (context.qualname(node.func) or "").startswith("torch."):
        return False
    device = keyword(node, "device")
    return device is not None and not _is_cpu(device)


def _self_attributes(context: ModuleContext, function: ast.AST, expr: ast.AST) -> set[str]:
    """The ``self.`` attributes an expression reads, through the function's own assignments."""
    assigned: dict[str, list[ast.AST]] = {}
    for node in context.walk_scope(function):
        if isinstance(node, ast.Assign):
            for name in (n for target in node.targets for n in bound_names(target)):
                assigned.setdefault(name, []).append(node.value)
    found, pending, done = set(), [expr], set()
    while pending:
        for node in ast.walk(pending.pop()):
            if isinstance(node, ast.Attribute) and last_name(node.value) == "self":
                found.add(node.attr)
            elif isinstance(node, ast.Name) and node.id not in done:
                done.add(node.id)
                pending.extend(assigned.get(node.id, []))
    return found


def _samples(context: ModuleContext, iterable: ast.AST) -> bool:
    """Iterating this gives one sample at a time."""
    if isinstance(iterable, (ast.Name, ast.Attribute)):
        name = last_name(iterable) or ""
        if _BATCH_NAME.match(name):
            return _uncollated(context, iterable)
        if _SAMPLES_NAME.match(name):
            calls = [c for value in _assigned(context, iterable) for c in _calls(value)]
            return not any(_BATCHER.search(last_name(c.func) or "") for c in calls)
        return _array_rows(context, iterable)
    if not isinstance(iterable, ast.Call) or context.qualname(iterable.func) != "range" or not iterable.args:
        return False
    stop = iterable.args[1] if len(iterable.args) > 1 else iterable.args[0]
    if isinstance(stop, (ast.Name, ast.Attribute)):
        return bool(_COUNT_NAME.match(last_name(stop) or ""))
    if isinstance(stop, ast.Call) and context.qualname(stop.func) == "len" and len(stop.args) == 1:
        return _samples(context, stop.args[0])
    # x.size(0), x.shape[0]: the batch dimension of a tensor.
    if isinstance(stop, ast.Call) and last_name(stop.func) == "size" and len(stop.args) == 1:
        return isinstance(stop.args[0], ast.Constant) and stop.args[0].value == 0
    return (
        isinstance(stop, ast.Subscript)
        and last_name(stop.value) == "shape"
        and (isinstance(stop.slice, ast.Constant) and stop.slice.value == 0)
    )


def _assigned(context: ModuleContext, name: ast.AST) -> list[ast.expr]:
    """What a plain name is assigned in its scope before ``name``, in source order."""
    if not isinstance(name, ast.Name):
        return []
    found = [
        node.value
        for node in context.walk_scope(context.scope_of(name))
        if isinstance(node, ast.Assign)
        and node.lineno < name.lineno
        and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets)
    ]
    return sorted(found, key=lambda v: (v.lineno, v.col_offset))


def _uncollated(context: ModuleContext, name: ast.AST) -> bool:
    function = context.function_of(name)
    if function is not None and (
        "collate" in function.name.lower()
        or any(
            kw.arg == "collate_fn" and last_name(kw.value) == function.name
            for call in context.nodes(ast.Call)
            for kw in call.keywords
        )
    ):
        return True
    sampled = ("random.sample", "random.choices")
    values = _assigned(context, name)
    return any(isinstance(v, ast.Call) and context.qualname(v.func) in sampled for v in values)


def _array_rows(context: ModuleContext, name: ast.AST) -> bool:
    """``for row in arr`` where ``arr = np.load(path)["x"].astype(...)``: the rows of a data array."""
    values = _assigned(context, name)
    root = values[-1] if values else None
    while True:
        if isinstance(root, (ast.Subscript, ast.Attribute)):
            root = root.value
        elif (
            isinstance(root, ast.Call)
            and isinstance(root.func, ast.Attribute)
            and not _array_call(context, root)
        ):
            root = root.func.value
        else:
            break
    return isinstance(root, ast.Call) and _array_call(context, root)


def _array_call(context: ModuleContext, call: ast.Call) -> bool:
    module, _, name = (context.qualname(call.func) or "").rpartition(".")
    return module in ("numpy", "torch", "numpy.random") and name in _ARRAY_MAKERS


def _in_sample_loop(context: ModuleContext, call: ast.Call, moved: ast.expr) -> tuple[str, str | None] | None:
    """The innermost loop (or comprehension) over samples whose iterations move a new value, and
    the user's function that makes that value per iteration (``make_np(i)``), where one does."""
    child: ast.AST = call
    for ancestor in context.ancestors(call):
        if isinstance(ancestor, SCOPES) or ancestor in context.step_loops:
            return None  # a loop with an optimizer step iterates batches: one transfer per step
        loops: list[ast.comprehension | Loop] = []
        if isinstance(ancestor, _COMPREHENSIONS) and child is not ancestor.generators[0].iter:
            loops, line = list(ancestor.generators), ancestor.lineno
        elif isinstance(ancestor, LOOPS) and any(child is s for s in ancestor.body):  # else: runs once
            loops, line = [ancestor], ancestor.lineno
        if loops:
            # A sample made by the user's function each iteration (generate, then move).
            generated = generated_sample(context, ancestor, call, moved)
            if generated is not None:
                return f"in {generated[0]}", generated[1]
        for loop in loops:
            if isinstance(loop, ast.While):
                continue  # a while loop iterates over nothing
            iterable = loop.iter
            # enumerate(x), zip(x, y), tqdm(x): what is iterated is their arguments.
            if isinstance(iterable, ast.Call) and last_name(iterable.func) in _WRAPPERS:
                iterables = iterable.args
            else:
                iterables = [iterable]
            over = next((p for p in iterables if _samples(context, p)), None)
            if over is not None and _varies(loop, ancestor, moved):
                return f"in the loop over `{ast.unparse(over)}` (line {line})", None
        child = ancestor
    return None


def _varies(loop: ast.AST, body: ast.AST, moved: ast.AST) -> bool:
    """The moved value changes with the loop: it reads the loop variable or a name bound inside."""
    target = getattr(loop, "target", None)
    fresh = (bound_names(target) if target is not None else set()) | names_bound_in(body)
    return bool(names_in(moved) & fresh)


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for call in context.nodes(ast.Call):
        found = _transfer(context, call)
        if found is None:
            continue
        what, moved, device = found
        where = _in_getitem(context, call, moved, device)
        if where is not None:
            yield (
                call,
                (
                    f"{what} {where} copies one sample at a time to the GPU (and needs CUDA in every "
                    "DataLoader worker); return CPU tensors and move the whole batch in the training loop "
                    "(pin_memory=True, .to(device, non_blocking=True))"
                ),
            )
            continue
        in_loop = _in_sample_loop(context, call, moved)
        if in_loop is not None:
            where, maker = in_loop
            batched = (
                f": `gen = batch.vectorize({maker})` (trainmedic.batch) makes it in one call per 256 samples"
                if maker
                else ""
            )
            yield (
                call,
                (
                    f"{what} {where} copies one sample at a time to the GPU; build the batch on the host "
                    f"(torch.stack / np.stack) and move it with one call, or make the whole batch on the device"
                    f"{batched}"
                ),
            )


RULE = Rule(
    code="TM108",
    name="per-sample-transfer",
    summary="Host-to-device copies one sample at a time: .to(device) in __getitem__ or a loop over samples.",
    why=(
        "Every transfer and every kernel launch has a fixed cost (tens of microseconds) that a small\n"
        "sample cannot amortise; a batch of 256 moved one sample at a time pays it 256 times. Synthetic\n"
        "samples generated one at a time on the GPU make tens of thousands of tiny launches and\n"
        "copies and keep the GPU 28 % busy; generating 256 samples per batched call and copying\n"
        "back once is typically 8-10x faster. In a Dataset, a CUDA call in __getitem__ also fails in forked DataLoader\n"
        "workers, which pushes the loader to num_workers=0."
    ),
    fix=(
        "Keep __getitem__ on the host: return CPU tensors, let the DataLoader collate a batch\n"
        "(pin_memory=True) and move it once per step with .to(device, non_blocking=True). In a loop\n"
        "over samples, stack them on the host and transfer the stacked batch, or vectorise the\n"
        "generation so one device call makes the whole batch."
    ),
    before="""
class SignalDataset(Dataset):
    def __init__(self, signals, labels, device):
        self.signals, self.labels, self.device = signals, labels, device

    def __getitem__(self, idx):
        x = torch.as_tensor(self.signals[idx], dtype=torch.float32)
        return x.to(self.device), self.labels[idx]
""",
    after="""
class SignalDataset(Dataset):
    def __init__(self, signals, labels):
        self.signals, self.labels = signals, labels

    def __getitem__(self, idx):
        return torch.as_tensor(self.signals[idx], dtype=torch.float32), self.labels[idx]

loader = DataLoader(SignalDataset(signals, labels), batch_size=256, pin_memory=True)
for x, y in loader:
    x = x.to(device, non_blocking=True)
""",
    check=check,
)
