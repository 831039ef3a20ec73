"""TM105: the same file or a database connection opened for every sample or every step."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixers.open_lazily import fix
from trainmedic.lint.model import Rule
from trainmedic.lint.opens import ScopeMemo, findings, opened, same_file, session_factories


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    factories, memo = session_factories(context), ScopeMemo(context)
    for call, before, when, varying in findings(memo, factories):
        name, path = opened(context, call, factories)  # type: ignore[misc]
        where = before or "lazily in each worker (if self.conn is None: ...)"
        if path is None:
            yield (
                call,
                (
                    f"{name}() opens a new database connection on {when}; connect once {where}, "
                    "or load the rows once with trainmedic.data: data.load(url, query=...)"
                ),
            )
        elif same_file(memo, call, path, varying):
            where = before or "in __init__ or lazily once per worker (if self.f is None: ...)"
            sql = "read_sql" in name
            what, verb = ("runs the same query", "run") if sql else ("opens the same file", "open")
            yield (
                call,
                (
                    f"{name}({ast.unparse(path)}) {what} on {when}; {verb} it once {where}, "
                    "or load it once with trainmedic.data: data.load(...)"
                ),
            )


RULE = Rule(
    code="TM105",
    name="open-per-sample",
    summary=(
        "A file, HDF5 file or database connection opened again for every sample (__getitem__) or every step."
    ),
    why=(
        "Opening is not free: h5py reads the file's metadata, a database connect is a network round\n"
        "trip and an authentication, and a reopened file starts with a cold chunk cache. Done once\n"
        "per sample it multiplies by the dataset size every epoch. An HDF5 file read per batch ran at\n"
        "37 s/step with the GPU at 0 %, and at 0.46 s/step (80x) once the data was loaded once; a\n"
        "PostgreSQL session opened for every item kept the GPU at 8-30 %, and loading the rows once\n"
        "was 10-30x faster. A file that depends on the sample (`Image.open(self.paths[idx])`) is\n"
        "one file per sample and is not flagged."
    ),
    fix=(
        "Open the file or connection once: in __init__, or lazily once per process, checked against\n"
        "os.getpid() (a handle the parent opened before a DataLoader forks must not be read by its\n"
        "workers) and left out of the pickle (an open HDF5 handle or connection cannot be pickled\n"
        "into spawned workers), as below. `trainmedic lint --fix` does this for an h5py.File\n"
        "or sqlite3.connect used for reads in a Dataset method: the handle is kept on the Dataset,\n"
        "opened again in each worker process and left out of its pickle. Better, when the data fits,\n"
        "read it once into RAM or VRAM with trainmedic.data: `data.load(path, fields=[...])` or\n"
        "`data.load(url, query='SELECT ...')`."
    ),
    before="""
import h5py
from torch.utils.data import Dataset

class Signals(Dataset):
    def __init__(self, path):
        self.path = path

    def __getitem__(self, idx):
        with h5py.File(self.path, "r") as f:
            return f["x"][idx], f["y"][idx]
""",
    after="""
import os

import h5py
from torch.utils.data import Dataset

class Signals(Dataset):
    def __init__(self, path):
        self._file = None  # opened in __getitem__() on first use in each process
        self._file_pid = None
        self.path = path

    def __getstate__(self):
        # Open files and connections cannot be pickled: each DataLoader worker opens its own.
        return {**self.__dict__, "_file": None}

    def __getitem__(self, idx):
        if self._file is None or self._file_pid != os.getpid():  # first use in this process
            self._file = h5py.File(self.path, "r")
            self._file_pid = os.getpid()
        f = self._file
        return f["x"][idx], f["y"][idx]
""",
    check=check,
    fixer=fix,
)
