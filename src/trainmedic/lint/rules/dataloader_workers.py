"""TM110: a DataLoader over a Dataset that reads files or a database, without worker processes
(or with workers that are torn down and restarted every epoch)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from trainmedic.lint.context import FUNCTIONS, Function, ModuleContext
from trainmedic.lint.model import Rule
from trainmedic.lint.syntax import argument, keyword, last_name, target_nodes

#: Calls that read a file (or decode one) when a sample is fetched.
_FILE_READS = frozenset(
    {
        "open",
        "io.open",
        "PIL.Image.open",
        "cv2.imread",
        "cv2.VideoCapture",
        "imageio.imread",
        "imageio.v2.imread",
        "imageio.v3.imread",
        "skimage.io.imread",
        "tifffile.imread",
        "h5py.File",
        "numpy.load",
        "numpy.fromfile",
        "numpy.loadtxt",
        "torch.load",
        "torchvision.io.read_image",
        "torchvision.io.read_file",
        "torchvision.io.read_video",
        "torchvision.io.decode_image",
        "torchvision.datasets.folder.default_loader",
        "soundfile.read",
        "librosa.load",
        "torchaudio.load",
        "scipy.io.wavfile.read",
        "scipy.io.loadmat",
        "nibabel.load",
        "pydicom.dcmread",
        "pydicom.read_file",
        "SimpleITK.ReadImage",
        "zarr.open",
        "lmdb.open",
    }
)
_DB_CONNECTS = frozenset(
    {"sqlite3.connect", "psycopg2.connect", "psycopg.connect", "pymysql.connect", "sqlalchemy.create_engine"}
)
#: ``cursor.execute(...)``, ``self.session.query(...)``: a database round trip.
_DB_METHODS = frozenset({"execute", "query", "fetchone", "fetchall", "fetchmany", "read_sql", "find_one"})
_DB_RECEIVER = re.compile(r"cursor|session|conn|db|engine|collection|^cur$", re.IGNORECASE)
_DATASET_BASES = ("Dataset",)
#: Library datasets that open and decode a file in every __getitem__ (MNIST, CIFAR hold arrays).
_LIBRARY_FOLDERS = frozenset(
    {
        "torchvision.datasets.ImageFolder",
        "torchvision.datasets.DatasetFolder",
        "torchvision.datasets.ImageNet",
        "torchvision.datasets.folder.ImageFolder",
        "torchvision.datasets.CocoDetection",
        "torchvision.datasets.CocoCaptions",
        "torchvision.datasets.VOCSegmentation",
        "torchvision.datasets.VOCDetection",
        "torchvision.datasets.Places365",
        "torchvision.datasets.Food101",
        "torchvision.datasets.Flowers102",
        "torchvision.datasets.StanfordCars",
        "torchvision.datasets.CelebA",
    }
)
#: Lightning hooks whose loader is built once and iterated every epoch.
_EPOCH_HOOKS = frozenset({"train_dataloader", "val_dataloader"})
#: Calls that take a loader without iterating it.
_NOT_ITERATING = frozenset(
    {"len", "print", "isinstance", "type", "id", "str", "repr", "hasattr", "getattr", "setattr"}
)


def _reads(context: ModuleContext, call: ast.Call) -> str | None:
    """ "file" or "database" when the call reads one, else None."""
    qualname = context.qualname(call.func) or ""
    if qualname in _FILE_READS or qualname.startswith("pandas.read_") and "sql" not in qualname:
        if qualname == "numpy.load" and argument(call, 1, "mmap_mode") is not None:
            return None  # pages of a memory map, usually from the page cache
        if qualname in ("open", "io.open", "h5py.File"):
            mode = argument(call, 1, "mode")
            if (
                isinstance(mode, ast.Constant)
                and isinstance(mode.value, str)
                and any(c in mode.value for c in "wax")
            ):
                return None
        return "file"
    if qualname in _DB_CONNECTS or qualname.startswith("pandas.read_sql"):
        return "database"
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in _DB_METHODS
        and _DB_RECEIVER.search(last_name(func.value) or "")
    ):
        return "database"
    return None


def _io_datasets(context: ModuleContext) -> dict[str, tuple[str, str, bool]]:
    """Dataset classes whose ``__getitem__`` (or a method it calls on ``self``) reads a file or a
    database: class name → ("file" or "database", "Image.open() at line 12", whether it keeps an
    open handle or connection on ``self``)."""
    found = {}
    for cls in context.nodes(ast.ClassDef):
        methods = {f.name: f for f in cls.body if isinstance(f, FUNCTIONS)}
        is_dataset = any((last_name(b) or "").endswith(_DATASET_BASES) for b in cls.bases)
        if "__getitem__" not in methods or not (
            is_dataset or ("Dataset" in cls.name and "__len__" in methods)
        ):
            continue
        handles = _file_handles(context, cls)
        keeps = bool(handles) or any(
            isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and _reads(context, n.value) == "database"
            and any(isinstance(t, ast.Attribute) for t in n.targets)
            for n in ast.walk(cls)
        )
        queue, seen = [methods["__getitem__"]], set()
        while queue and cls.name not in found:
            method = queue.pop()
            seen.add(method)
            for node in sorted(
                context.walk_scope(method),
                key=lambda n: (getattr(n, "lineno", 0), -getattr(n, "col_offset", 0)),
            ):
                if isinstance(node, ast.Subscript) and _root(node) in handles:
                    found[cls.name] = ("file", f"{ast.unparse(node)} at line {node.lineno}", keeps)
                    break
                if not isinstance(node, ast.Call):
                    continue
                kind = _reads(context, node)
                if kind is not None and not _loads_once(context, node, method):
                    found[cls.name] = (kind, f"{ast.unparse(node.func)}() at line {node.lineno}", keeps)
                    break
                func = node.func
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "self"
                ):
                    callee = methods.get(func.attr)
                    if callee is not None and callee not in seen:
                        queue.append(callee)
    return found


def _loads_once(context: ModuleContext, node: ast.AST, method: ast.AST) -> bool:
    """``if self.data is None: self.data = np.load(...)``: read on the first call, then kept."""
    for ancestor in context.ancestors(node):
        if ancestor is method:
            return False
        if isinstance(ancestor, ast.If):
            tested = {ast.unparse(n) for n in ast.walk(ancestor.test) if isinstance(n, ast.Attribute)}
            tested |= {
                f"self.{c.value}"
                for c in ast.walk(ancestor.test)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)  # hasattr(self, "data")
            }
            assigned = {
                ast.unparse(t) for n in ast.walk(ancestor) if isinstance(n, ast.Assign) for t in n.targets
            }
            if tested & assigned:
                return True
    return False


def _file_handles(context: ModuleContext, cls: ast.ClassDef) -> set[str]:
    """``self.h5`` when the class assigns it ``h5py.File(...)`` or ``zarr.open(...)``: indexing it reads the disk."""
    handles: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Call, ast.Subscript)):
            call: ast.expr = node.value
            while isinstance(call, ast.Subscript):
                call = call.value
            if isinstance(call, ast.Call) and (context.qualname(call.func) or "").startswith(
                ("h5py.File", "zarr.open")
            ):
                handles.update(ast.unparse(t) for t in node.targets if isinstance(t, ast.Attribute))
    return handles


def _root(node: ast.AST) -> str:
    while isinstance(node, ast.Subscript):
        node = node.value
    return ast.unparse(node)


def _dataset_class(
    context: ModuleContext, expr: ast.AST, at: ast.AST, classes: dict, depth: int = 0
) -> str | None:
    """The I/O Dataset class ``expr`` is an instance of: ``ImageDataset(...)``, a name or
    ``self.attr`` assigned one, a ``Subset`` or ``random_split`` of one."""
    if depth > 5:
        return None
    if isinstance(expr, ast.Call):
        name = last_name(expr.func)
        qualname = context.qualname(expr.func) or ""
        if qualname in _LIBRARY_FOLDERS or qualname.startswith("torchaudio.datasets."):
            classes.setdefault(name, ("file", f"{qualname} opens and decodes a file per sample", False))
        if name in classes:
            return name
        if name in ("Subset", "random_split") and expr.args:
            return _dataset_class(context, expr.args[0], at, classes, depth + 1)
        return None
    if not isinstance(expr, (ast.Name, ast.Attribute)):
        return None
    target = ast.unparse(expr)
    scopes: list[ast.AST]
    if isinstance(expr, ast.Attribute):
        cls = context.class_of(at)
        scopes = [f for f in cls.body if isinstance(f, FUNCTIONS)] if cls is not None else []
    else:
        scope = context.scope_of(at)
        args = scope.args if isinstance(scope, (*FUNCTIONS, ast.Lambda)) else None
        if args is not None and expr.id in {a.arg for a in ast.walk(args) if isinstance(a, ast.arg)}:
            return None  # a parameter: whatever the caller passes
        scopes = [scope, context.tree]
    for scope in scopes:
        values = [
            n.value
            for n in context.walk_scope(scope)
            if isinstance(n, ast.Assign) and any(target in _unpacked(t) for t in n.targets)
        ]
        # Any branch's dataset counts: `if args.dummy: FakeData(...) else: ImageFolder(...)` reads
        # files on the default path.
        for value in values:
            found = _dataset_class(context, value, value, classes, depth + 1)
            if found:
                return found
    return None


def _unpacked(target: ast.AST) -> list[str]:
    """``a`` → ["a"]; ``self.train, self.val`` → ["self.train", "self.val"]."""
    return [
        ast.unparse(t) for t in target_nodes(target) if not isinstance(t, (ast.Tuple, ast.List, ast.Starred))
    ]


def _iterated_every_epoch(context: ModuleContext, loader_call: ast.Call) -> str | None:
    """Where a loader bound by ``loader = DataLoader(...)`` is iterated (or handed to a function)
    in a loop that does not also rebuild it, or in a function called from such a loop."""
    assign = context.parent(loader_call)
    if not isinstance(assign, ast.Assign) or len(assign.targets) != 1:
        return None
    target = ast.unparse(assign.targets[0])
    build_loops = set(context.enclosing_loops(assign))
    scopes: list[ast.AST]
    if isinstance(assign.targets[0], ast.Attribute):
        cls = context.class_of(assign)
        scopes = [f for f in ast.walk(cls) if isinstance(f, FUNCTIONS)] if cls is not None else []
    elif context.scope_of(assign) is context.tree:
        # Functions that read the module's loader, not one of their own by the same name.
        scopes = [context.tree] + [
            f
            for f in context.nodes(*FUNCTIONS)
            if target not in {a.arg for a in ast.walk(f.args) if isinstance(a, ast.arg)}
            and not any(
                isinstance(n, ast.Name) and n.id == target and isinstance(n.ctx, ast.Store)
                for n in context.walk_scope(f)
            )
        ]
    else:
        scopes = [context.scope_of(assign)]
    for scope in scopes:
        for node in context.walk_scope(scope):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                uses = [n for n in ast.walk(node.iter) if ast.unparse(n) == target]
            elif isinstance(node, ast.Call) and last_name(node.func) not in _NOT_ITERATING:
                uses = [
                    a for a in [*node.args, *(k.value for k in node.keywords)] if ast.unparse(a) == target
                ]
            else:
                continue
            if not uses:
                continue
            if any(loop not in build_loops for loop in context.enclosing_loops(node)):
                return f"line {node.lineno}"
            if isinstance(scope, FUNCTIONS) and (caller := _called_in_a_loop(context, scope)) is not None:
                return f"line {node.lineno}, in {scope.name}() called from the loop at line {caller.lineno}"
    return None


def _called_in_a_loop(context: ModuleContext, function: Function) -> ast.Call | None:
    """The call of ``train_one_epoch()`` in ``for epoch in range(epochs):``."""
    return next(
        (call for call in context.callers(function) if next(context.enclosing_loops(call), None) is not None),
        None,
    )


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    classes = _io_datasets(context)
    for call in context.nodes(ast.Call):
        if context.qualname(call.func) != "torch.utils.data.DataLoader" or any(
            k.arg is None for k in call.keywords
        ):
            continue
        dataset = argument(call, 0, "dataset")
        name = _dataset_class(context, dataset, call, classes) if dataset is not None else None
        if name is None:
            continue
        kind, read, keeps = classes[name]
        what = f"{name}.__getitem__ reads a {kind} ({read})"
        workers = argument(call, 5, "num_workers")
        if workers is None or (isinstance(workers, ast.Constant) and workers.value == 0):
            setting = "without num_workers" if workers is None else "with num_workers=0"
            advice = "set num_workers (4-8, up to the CPU cores) so reads overlap the GPU step"
            if kind == "database":
                advice += (
                    " and open the connection lazily in each worker: a DB session cannot be pickled into "
                    "workers (the usual reason num_workers > 0 fails with a database)"
                )
            yield (
                call,
                f"DataLoader over {name} {setting}: {what} in the training process while the GPU waits; {advice}",
            )
            continue
        if keyword(call, "persistent_workers") is not None:
            continue
        function = context.function_of(call)
        where: str | None
        if (
            function is not None
            and function.name in _EPOCH_HOOKS
            and isinstance(context.parent(call), ast.Return)
        ):
            where = f"by Lightning, from {function.name}()"
        else:
            where = _iterated_every_epoch(context, call)
        if where is not None:
            yield (
                call,
                (
                    f"DataLoader over {name} (num_workers={ast.unparse(workers)}) is iterated every epoch "
                    f"({where}) without persistent_workers=True: its worker processes are started again each epoch"
                    + (", and each reopens its files or connections" if keeps else "")
                    + "; pass persistent_workers=True"
                    + (
                        ""
                        if isinstance(workers, ast.Constant)
                        else f" (persistent_workers={ast.unparse(workers)} > 0)"
                    )
                ),
            )


RULE = Rule(
    code="TM110",
    name="dataloader-workers",
    summary="A DataLoader over a Dataset that reads files or a database, with no worker processes.",
    why=(
        "With num_workers=0 every __getitem__ (open, decode, query) runs in the training process,\n"
        "one sample after another, while the GPU waits. A PostgreSQL query per item with\n"
        "num_workers=0 (workers fail when the DB session cannot be pickled) kept a GPU at 8-30 %;\n"
        "HDF5 read in the training loop ran at 37 s/step with the GPU at 0 %. With workers but without\n"
        "persistent_workers=True, the worker processes (and each one's open files and connections)\n"
        "are torn down and started again at every epoch."
    ),
    fix=(
        "Pass num_workers (4-8, at most the CPU cores) and pin_memory=True; open files and DB\n"
        "connections lazily inside __getitem__ (`if self.conn is None: ...`) so each worker opens\n"
        "its own; add persistent_workers=True when the loader is iterated every epoch. When the\n"
        "data fits in RAM or VRAM, read it once with trainmedic.data (`data.load(...)`) instead."
    ),
    before="""
from PIL import Image
from torch.utils.data import DataLoader, Dataset

class ImageDataset(Dataset):
    def __init__(self, paths, labels):
        self.paths, self.labels = paths, labels

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return transform(Image.open(self.paths[i]).convert("RGB")), self.labels[i]

loader = DataLoader(ImageDataset(paths, labels), batch_size=64, shuffle=True)
""",
    after="""
from PIL import Image
from torch.utils.data import DataLoader, Dataset

class ImageDataset(Dataset):
    def __init__(self, paths, labels):
        self.paths, self.labels = paths, labels

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return transform(Image.open(self.paths[i]).convert("RGB")), self.labels[i]

loader = DataLoader(ImageDataset(paths, labels), batch_size=64, shuffle=True,
                    num_workers=8, pin_memory=True, persistent_workers=True)
""",
    check=check,
    not_fixable=(
        "how many workers fit depends on the machine's cores and on whether the data source is safe to share across processes; set num_workers (and persistent_workers=True) by hand"
    ),
)
