"""Classify a Python stack into a category, a finer kind, and the user's line.

The stack sampler calls :func:`classify_stack` ~100 times a second on the main thread's frame, so
everything here is cached per code object: a frame costs one dict lookup after its first sight.

A frame is *user code* when its file lies outside the interpreter's library folders,
site-packages and trainmedic itself. Library frames are recognised by module name (more robust
than paths across venvs): the innermost decisive library on the stack says what the user's line
is waiting on — an h5py read, a database round trip, a collate, a forward pass, a logging call.

trainmedic's own data loader is one of those libraries: time under ``trainmedic.data`` is a
``data`` wait at the user's ``for batch in loader`` line, except its host-to-device copies
(``trainmedic.data.transfer`` on a CUDA run), which are ``transfer``.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import warnings
from dataclasses import dataclass
from types import CodeType, FrameType

from trainmedic.categories import COMPUTE, DATA, HOST_OTHER, SYNC, TRANSFER
from trainmedic.run.probe.by_code import ByCode
from trainmedic.userfiles import UserFiles, shown_path

#: The "category" of modules that decide nothing: skipped like an unknown library (see _LIBRARIES).
GLUE = "glue"
#: The kind of a sample taken while trainmedic's own loop tracer ran: not the user's time.
PROBE = "probe"
_LOOP_TRACER = "trainmedic.run.probe.loops"
_PROBE_PACKAGE = "trainmedic.run.probe."

# (module-name prefix, category, kind). Longest prefix wins, so `torch.utils.data` beats `torch`.
_LIBRARIES: tuple[tuple[str, str, str], ...] = (
    ("h5py", DATA, "hdf5"),
    ("tables", DATA, "hdf5"),
    ("zarr", DATA, "zarr"),
    ("numcodecs", DATA, "zarr"),
    ("sqlite3", DATA, "database"),
    ("sqlalchemy", DATA, "database"),
    ("psycopg", DATA, "database"),
    ("psycopg2", DATA, "database"),
    ("pymysql", DATA, "database"),
    ("pymongo", DATA, "database"),
    ("PIL", DATA, "image decode"),
    ("cv2", DATA, "image decode"),
    ("pandas.io", DATA, "disk"),
    ("pyarrow", DATA, "disk"),
    ("numpy.lib._npyio_impl", DATA, "disk"),
    ("numpy.lib.npyio", DATA, "disk"),
    ("numpy.lib.format", DATA, "disk"),
    ("torch.utils.data._utils.collate", DATA, "collate"),
    ("torch.utils.data", DATA, "loader"),
    ("trainmedic.data", DATA, "loader"),
    # trainmedic.data's host-to-device copies; on a CPU run that module only gathers (see below).
    ("trainmedic.data.transfer", TRANSFER, "copy"),
    ("torch.nn", COMPUTE, "forward"),
    # Module's other methods (the walks over its parameters and submodules, attribute lookup,
    # to(), zero_grad(), state_dict()) run for whoever calls them: clipping that walks
    # model.parameters() is the update, not a forward pass. Its call machinery says forward
    # (_FUNCTIONS). Under load the sampler lands in these pure-Python walks more often: nanoGPT's
    # clipping line read a third "forward" with the test suite's two workers on one core.
    ("torch.nn.modules.module", GLUE, ""),
    # Gradient clipping is part of the update, not of the forward (nanoGPT clips every step).
    ("torch.nn.utils.clip_grad", COMPUTE, "optimizer"),
    ("torch.autograd", COMPUTE, "backward"),
    ("torch.optim", COMPUTE, "optimizer"),
    ("torch.amp", COMPUTE, "optimizer"),
    ("torch.amp.autocast_mode", COMPUTE, "forward"),
    # Glue, not a decision: torch.nn.functional and the Python tensor methods in torch._tensor
    # run for whoever calls them. Called from the model's modules, those modules' frames say
    # forward; called from a per-sample function or a batch helper, the user's code decides
    # (a tensor's __format__ or split() once read as "backward" at a generator's line).
    ("torch.nn.functional", GLUE, ""),
    ("torch.functional", GLUE, ""),
    ("torch._tensor", GLUE, ""),
    ("torch.overrides", GLUE, ""),
    ("torch.autograd.grad_mode", GLUE, ""),
    ("torch.utils._contextlib", GLUE, ""),
    ("torch.random", GLUE, ""),
    ("torch._dynamo", COMPUTE, "forward"),
    # A rank blocked in dist.all_reduce / barrier waits for the other ranks (probe/collectives.py
    # times it too). DDP's own all-reduce waits inside backward, in C++: no frame of its own.
    ("torch.distributed.distributed_c10d", SYNC, "collective"),
    ("torch.distributed._functional_collectives", SYNC, "collective"),
    # Keras 3 (any backend). Its data adapters, epoch iterator and PyDataset machinery are the
    # data loader: the user's own generator or PyDataset.__getitem__ under them is a "transform"
    # at the user's line. The trainer, layers, ops and the backend are the model's compute.
    ("keras", COMPUTE, "forward"),
    ("keras.src.trainers.data_adapters", DATA, "loader"),
    ("keras.src.trainers.epoch_iterator", DATA, "loader"),
    ("keras.src.utils.dataset_utils", DATA, "loader"),
    ("keras.src.utils.image_dataset_utils", DATA, "loader"),
    ("keras.src.utils.text_dataset_utils", DATA, "loader"),
    ("keras.src.utils.audio_dataset_utils", DATA, "loader"),
    ("keras.src.utils.timeseries_dataset_utils", DATA, "loader"),
    ("keras.src.optimizers", COMPUTE, "optimizer"),
    ("keras.src.backend.torch.optimizers", COMPUTE, "optimizer"),
    ("keras.src.backend.tensorflow.optimizer", COMPUTE, "optimizer"),
    ("keras.src.backend.jax.optimizer", COMPUTE, "optimizer"),
    ("keras.src.callbacks", HOST_OTHER, "logging"),
    ("keras.src.callbacks.progbar_logger", HOST_OTHER, "progress bar"),
    ("keras.src.utils.progbar", HOST_OTHER, "progress bar"),
    # The progress bar prints through io_utils; callbacks turn logs into floats with python_utils.
    ("keras.src.utils.io_utils", HOST_OTHER, "logging"),
    ("keras.src.utils.python_utils", HOST_OTHER, "logging"),
    ("keras.src.callbacks.model_checkpoint", HOST_OTHER, "checkpoint"),
    ("keras.src.callbacks.backup_and_restore", HOST_OTHER, "checkpoint"),
    ("keras.src.saving", HOST_OTHER, "checkpoint"),
    # TensorFlow: tf.data (and a generator it calls back into) is data; the rest runs the model.
    # A tf.data pipeline inside a tf.function has no Python frames: only TF's profiler sees it.
    ("tensorflow", COMPUTE, "forward"),
    ("tensorflow.python.data", DATA, "loader"),
    ("tensorflow.python.keras.engine.data_adapter", DATA, "loader"),
    ("tensorflow.python.keras.callbacks", HOST_OTHER, "logging"),
    ("tensorflow.python.keras.utils.generic_utils", HOST_OTHER, "progress bar"),
    ("tensorflow.python.training.tracking", HOST_OTHER, "checkpoint"),
    ("tensorflow.python.checkpoint", HOST_OTHER, "checkpoint"),
    ("torch.serialization", HOST_OTHER, "checkpoint"),
    ("logging", HOST_OTHER, "logging"),
    ("json", HOST_OTHER, "logging"),
    ("csv", HOST_OTHER, "logging"),
    ("pickle", HOST_OTHER, "serialisation"),
    ("tqdm", HOST_OTHER, "progress bar"),
    ("wandb", HOST_OTHER, "logging"),
    ("mlflow", HOST_OTHER, "logging"),
    ("torch.utils.tensorboard", HOST_OTHER, "logging"),
    ("tensorboard", HOST_OTHER, "logging"),
    ("tensorboardX", HOST_OTHER, "logging"),
    # A module being imported runs its body under importlib: whatever that body calls (torch.nn
    # building its classes), the time is the import's, not a forward pass (see classify).
    ("importlib", HOST_OTHER, "import"),
)
_IMPORT = (HOST_OTHER, "import")

# Functions whose module says one thing and whose purpose another: torch.load reads data.
_FUNCTIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("torch.serialization", "load"): (DATA, "disk"),
    # Tensor.backward lives among torch._tensor's glue methods: it alone runs autograd's engine.
    ("torch._tensor", "backward"): (COMPUTE, "backward"),
    # A module's call is its forward pass; torch.nn's Module runs it through these two.
    ("torch.nn.modules.module", "_wrapped_call_impl"): (COMPUTE, "forward"),
    ("torch.nn.modules.module", "_call_impl"): (COMPUTE, "forward"),
}

_LOADER_COPY = (TRANSFER, "copy")

# Data kinds more specific than the loader that calls them: a sample inside
# DataLoader -> Dataset.__getitem__ -> h5py is an HDF5 wait, not a "loader" wait.
_DATA_SPECIFICITY = {"loader": 0, "transform": 1, "collate": 2}

# C builtins and tensor methods leave no Python frame; the user's line text is the only witness.
_DATABASE = re.compile(r"\.(execute|executemany|fetchall|fetchone|fetchmany)\s*\(|read_sql")
_PRINT = re.compile(r"(^|[^\w.])print\s*\(")
_SYNC = re.compile(r"\.(item|cpu|numpy|tolist)\s*\(|(^|[^\w.])float\s*\(|\.synchronize\s*\(")
_TRANSFER = re.compile(r"\.(to|cuda)\s*\(|\.copy_\s*\(")
_WRITE = re.compile(r"\.(write|flush)\s*\(")


@dataclass(frozen=True)
class Classified:
    """What one sample of the main thread's stack says."""

    #: A category, or ``None`` when only user code is on the stack (resolved later by position).
    category: str | None
    kind: str
    #: The innermost user frame as ``path:line``, or ``None`` if no user frame is on the stack.
    where: str | None
    #: The code object of the innermost user frame (the function the time is spent in).
    user_code: CodeType | None


class FrameClassifier:
    """Caches, per code object, whether it is user code and which library family it belongs to."""

    def __init__(self, cwd: str | None = None, cuda: bool = False, user: UserFiles | None = None) -> None:
        self._cwd = cwd or os.getcwd()
        #: Another process's files (``trainmedic attach``) are judged against its own interpreter.
        self._user = user if user is not None else UserFiles([self._cwd], anywhere=True)
        self._code_cache: ByCode[tuple[bool, tuple[str, str] | None]] = ByCode()
        self._user_files: dict[str, bool] = {}  # a file's many functions are judged once
        self._line_cache: dict[tuple[str, int], tuple[str, str] | None] = {}
        self._where_cache: dict[tuple[str, int], str] = {}
        self.cuda = cuda

    def code_info(self, frame: FrameType) -> tuple[bool, tuple[str, str] | None]:
        code = frame.f_code
        info = self._code_cache.get(code)
        if info is None:
            filename = code.co_filename
            module = frame.f_globals.get("__name__") or ""
            family = _FUNCTIONS.get((module, code.co_name)) or (
                _family(module) if isinstance(module, str) else None
            )
            if family == _LOADER_COPY and not self.cuda:
                family = (DATA, "loader")  # no device to copy to: the module only gathers the batch
            glue = family is not None and family[0] == GLUE
            if glue:
                family = None
            is_user = not glue and family is None and self.is_user_file(filename)
            info = self._code_cache[code] = (is_user, family)
        return info

    def is_user_file(self, filename: str) -> bool:
        known = self._user_files.get(filename)
        if known is None:
            known = self._user_files[filename] = filename in self._user
        return known

    def where(self, filename: str, lineno: int) -> str:
        key = (filename, lineno)
        text = self._where_cache.get(key)
        if text is None:
            text = self._where_cache[key] = f"{shown_path(filename, self._cwd)}:{lineno}"
        return text

    def line_family(self, filename: str, lineno: int) -> tuple[str, str] | None:
        key = (filename, lineno)
        if key in self._line_cache:
            return self._line_cache[key]
        text = linecache.getline(filename, lineno).split("#", 1)[0]
        family: tuple[str, str] | None = None
        if _DATABASE.search(text):
            family = (DATA, "database")  # sqlite3's cursor methods are C: no frame of their own
        elif _PRINT.search(text):
            family = (HOST_OTHER, "print")
        elif self.cuda and _SYNC.search(text):
            family = (SYNC, "host read")
        elif self.cuda and _TRANSFER.search(text):
            family = (TRANSFER, "copy")
        elif _WRITE.search(text):
            family = (HOST_OTHER, "file write")
        self._line_cache[key] = family
        return family

    def _in_loop_tracer(self, frame: FrameType | None) -> bool:
        if self.cuda:
            return False
        while frame is not None:
            module = frame.f_globals.get("__name__")
            if module == _LOOP_TRACER:
                return True
            if not (isinstance(module, str) and module.startswith(_PROBE_PACKAGE)):
                return False  # the user's frame (or a library's) came first: not the tracer's
            frame = frame.f_back
        return False

    def classify(self, frame: FrameType | None) -> Classified:
        if self._in_loop_tracer(frame):
            # The loop clock's line tracer and the step boundary it calls, not the user's line
            # they ran for: charged to that line, they once made the first line of a
            # module-level loop body its hottest (44-61 % sampled, 3.6 % timed without
            # trainmedic). On a GPU the boundary waits for the iteration's kernels, which are
            # the user's: kept there.
            return Classified(None, PROBE, None, None)
        user_frame: FrameType | None = None
        decisive: tuple[str, str] | None = None
        data_kind: str | None = None
        copying = False  # a host-to-device copy is the innermost library work, even inside a loader
        importing = False
        depth = 0
        while frame is not None and depth < 256:
            is_user, family = self.code_info(frame)
            if family == _IMPORT:
                importing = True
            if is_user:
                if user_frame is None:
                    user_frame = frame
            elif family is not None:
                category, kind = family
                if category == DATA:
                    if kind == "loader" and user_frame is not None:
                        kind = "transform"  # the user's own __getitem__ runs inside the loader
                    # Keep the most specific data kind seen anywhere on the stack.
                    if data_kind is None or _DATA_SPECIFICITY.get(data_kind, 9) < _DATA_SPECIFICITY.get(
                        kind, 9
                    ):
                        data_kind = kind
                elif decisive is None:
                    decisive = family  # the innermost non-data library says what the wait is
                    copying = category == TRANSFER and data_kind is None
            frame = frame.f_back
            depth += 1

        where = None
        user_code = None
        if user_frame is not None:
            user_code = user_frame.f_code
            where = self.where(user_code.co_filename, user_frame.f_lineno or 0)
        if (
            user_frame is not None
            and user_code is not None
            and (data_kind in ("loader", "transform") or (data_kind is None and decisive is None))
        ):
            # The user's line is inside a C call (no frame of its own): its text is the witness.
            line = self.line_family(user_code.co_filename, user_frame.f_lineno or 0)
            if data_kind is None:
                decisive = line
            elif line is not None and line[0] == DATA:
                data_kind = line[1]  # a database query inside Dataset.__getitem__
        if importing:
            return Classified(HOST_OTHER, "import", where, user_code)
        if copying and decisive is not None:
            return Classified(decisive[0], decisive[1], where, user_code)
        if data_kind is not None:
            return Classified(DATA, data_kind, where, user_code)
        if decisive is not None:
            return Classified(decisive[0], decisive[1], where, user_code)
        return Classified(None, "", where, user_code)


def _family(module: str) -> tuple[str, str] | None:
    best: tuple[str, str, str] | None = None
    for prefix, category, kind in _LIBRARIES:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, category, kind)
    return None if best is None else (best[1], best[2])


def read_tree(path: str) -> ast.Module | None:
    """The syntax tree of a user's source file, or None when it cannot be read or parsed.

    The user's code is read, not run: its SyntaxWarnings are not ours to show."""
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
