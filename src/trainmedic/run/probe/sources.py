"""Which data sources a watched script opened: the facts behind an exact ``data.load(...)`` advice.

While a session runs, thin wrappers note what the script reads its data from: ``h5py.File``
paths and the datasets opened in them, ``sqlite3.connect`` paths and the SQL each connection
runs most often, SQLAlchemy engine URLs and their statements, ``np.load`` and ``zarr.open``
paths, the ``torch.utils.data.Dataset`` each ``DataLoader`` wraps (with its batch size), and
``trainmedic.data.load`` calls. Modules imported later are wrapped by the post-import hook.

Costs (measured on the 2-core dev VM): opening a file or connection, or ``np.load``, pays one
short stack walk (~3 µs, to leave trainmedic.data's own reads out). A query pays one dict lookup
and one counter (~0.9 µs on top of a 5.7 µs trivial SQLite query); its first 64 runs also
compare their parameters with the first run's, which tells a per-batch selector (ids, offsets
that change every run) from a filter (a split name that never changes). An HDF5 dataset opened
with ``f[name]`` pays ~2.6 µs on top of h5py's ~31 µs. Reads of an open dataset and rows
fetched from a cursor are never touched.

SQLite connections made by the script get ``factory=`` a :class:`sqlite3.Connection` subclass
whose ``execute`` and ``cursor`` record the SQL (the C methods cannot be wrapped directly); a
script that passes its own ``factory=`` keeps it and goes unrecorded. The second time a SELECT
on an SQLite file runs, it is run once more on a read-only connection to see one row: which
columns are BLOBs and how many bytes they hold, which ``data.load``'s ``schema=`` needs.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from trainmedic.run.probe.patches import Patches
from trainmedic.run.probe.queries import DatabaseStats
from trainmedic.run.probe.source_facts import (
    Database,
    DatasetUse,
    FileUse,
    Hdf5File,
    LoaderUse,
    Sources,
)
from trainmedic.userfiles import is_user_file

MAX_FILES = 256

_active: SourceRecorder | None = None


class _RecordingCursor(sqlite3.Cursor):
    def execute(self, sql: Any, *args: Any) -> Any:
        db = getattr(self.connection, "_trainmedic_db", None)
        if db is not None:
            db.run(sql, args[0] if args else ())
        return super().execute(sql, *args)


class _RecordingConnection(sqlite3.Connection):
    """A plain sqlite3 connection that notes the SQL it runs (see the module docstring)."""

    _trainmedic_db: DatabaseStats | None = None

    def execute(self, sql: Any, *args: Any) -> Any:
        db = self._trainmedic_db
        if db is not None:
            db.run(sql, args[0] if args else ())
        return super().execute(sql, *args)

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(_RecordingCursor if factory is None else factory)


class SourceRecorder:
    def __init__(self) -> None:
        self._patches = Patches()
        self._databases: dict[str, DatabaseStats] = {}
        self._engines: dict[int, DatabaseStats] = {}
        self._hdf5: dict[str, dict[str, Any]] = {}
        self._hdf5_by_fileno: dict[Any, dict[str, Any]] = {}
        self._numpy: dict[str, list] = {}
        self._zarr: dict[str, list] = {}
        self._datasets: list[DatasetUse] = []
        self._loaders: list[LoaderUse] = []
        #: The first DataLoader with worker processes: its dataset (held until the session ends,
        #: for probe/worker_items.py), workers and batch size. Training loaders are built first.
        self.worker_loader: tuple[Any, int, int | None] | None = None
        self._sa_listener: tuple[Any, Any] | None = None

    def install(self) -> None:
        global _active
        _active = self
        for name, hook in (
            ("sqlite3", self._hook_sqlite3),
            ("numpy", self._hook_numpy),
            ("h5py", self._hook_h5py),
            ("zarr", self._hook_zarr),
            ("sqlalchemy", self._hook_sqlalchemy),
            ("torch", self._hook_torch),
            ("trainmedic.data", self._hook_trainmedic_data),
        ):
            self._patches.after_import(name, hook)

    def uninstall(self) -> None:
        global _active
        if _active is self:
            _active = None
        self._patches.undo()
        if self._sa_listener is not None:
            event, (target, listener) = self._sa_listener
            # An SQLAlchemy that cannot remove it keeps a listener that finds no engine of ours.
            with contextlib.suppress(Exception):
                event.remove(target, "before_cursor_execute", listener)
            self._sa_listener = None
        for db in self._databases.values():
            db.live = False

    def snapshot(self, model_batch: int | None = None) -> Sources:
        databases = []
        for db in self._databases.values():
            queries = tuple(
                q.freeze() for q in sorted(db.queries.values(), key=lambda q: q.count, reverse=True)
            )
            if db.connects or queries:
                databases.append(Database(db.url, db.connects, queries, db.via))
        hdf5 = tuple(
            Hdf5File(path, rec["opens"], tuple(rec["datasets"].items())) for path, rec in self._hdf5.items()
        )
        return Sources(
            databases=tuple(databases),
            hdf5=hdf5,
            numpy=tuple(FileUse(p, n, mapped) for p, (n, mapped) in self._numpy.items()),
            zarr=tuple(FileUse(p, n, False) for p, (n, _) in self._zarr.items()),
            datasets=tuple(self._datasets),
            loaders=tuple(self._loaders),
            model_batch=model_batch,
        )

    # -- patching ------------------------------------------------------------------------------

    def _patch(self, owner: Any, name: str, wrapper: Callable) -> None:
        original = getattr(owner, name)
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__doc__ = getattr(original, "__doc__", None)
        self._patches.replace(owner, name, wrapper)

    def _hook_sqlite3(self, module: Any) -> None:
        original = module.connect

        def connect(*args: Any, **kwargs: Any) -> Any:
            recorder = _active
            if (
                recorder is None
                or len(args) > 5
                or "factory" in kwargs
                or _called_from(("trainmedic.data", "sqlalchemy"))
            ):
                return original(*args, **kwargs)  # SQLAlchemy's engines are recorded by its own event
            conn = original(*args, factory=_RecordingConnection, **kwargs)
            database = args[0] if args else kwargs.get("database")
            conn._trainmedic_db = recorder._sqlite_db(database, bool(kwargs.get("uri")))
            return conn

        self._patch(module, "connect", connect)
        dbapi2 = sys.modules.get("sqlite3.dbapi2")
        if dbapi2 is not None and dbapi2.connect is original:
            self._patch(dbapi2, "connect", connect)

    def _sqlite_db(self, database: Any, uri: bool) -> DatabaseStats:
        path = None
        if isinstance(database, (str, bytes, os.PathLike)):
            text = os.fsdecode(database)
            if not uri and text and text != ":memory:":
                path = os.path.abspath(text)
        url = (
            f"sqlite:///{path}"
            if path is not None
            else f"sqlite:///{os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else ':memory:'}"
        )
        db = self._databases.get(url)
        if db is None:
            db = self._databases[url] = DatabaseStats(url, "sqlite3", path)
        db.connects += 1
        return db

    def _hook_numpy(self, module: Any) -> None:
        original = module.load

        def load(file: Any, *args: Any, **kwargs: Any) -> Any:
            value = original(file, *args, **kwargs)
            if (
                _active is not None
                and isinstance(file, (str, os.PathLike))
                and not _called_from(("trainmedic.data",))
            ):
                mapped = bool(kwargs.get("mmap_mode") or (args[0] if args else None))
                _active._note_file(_active._numpy, os.path.abspath(os.fspath(file)), mapped)
            return value

        self._patch(module, "load", load)

    def _note_file(self, table: dict[str, list], path: str, mapped: bool) -> None:
        entry = table.get(path)
        if entry is None:
            if len(table) >= MAX_FILES:
                return
            entry = table[path] = [0, mapped]
        entry[0] += 1

    def _hook_zarr(self, module: Any) -> None:
        for name in ("open", "open_array", "open_group", "open_consolidated"):
            if hasattr(module, name):
                self._patch(module, name, self._zarr_opener(getattr(module, name)))

    def _zarr_opener(self, original: Callable) -> Callable:
        def opener(*args: Any, **kwargs: Any) -> Any:
            value = original(*args, **kwargs)
            store = args[0] if args else kwargs.get("store")
            if (
                _active is not None
                and isinstance(store, (str, os.PathLike))
                and not _called_from(("trainmedic.data",))
            ):
                text = os.fspath(store)
                _active._note_file(_active._zarr, text if "://" in text else os.path.abspath(text), False)
            return value

        return opener

    def _hook_h5py(self, module: Any) -> None:
        file_init = module.File.__init__
        group_getitem = module.Group.__getitem__
        dataset_type, file_type = module.Dataset, module.File

        def __init__(f: Any, *args: Any, **kwargs: Any) -> None:
            file_init(f, *args, **kwargs)
            name = args[0] if args else kwargs.get("name")
            # h5py itself builds File objects from open ids (``obj.file``): only paths are opens.
            if (
                _active is not None
                and isinstance(name, (str, bytes, os.PathLike))
                and not _called_from(("trainmedic.data",))
            ):
                _active._hdf5_opened(f)

        def __getitem__(group: Any, name: Any) -> Any:
            obj = group_getitem(group, name)
            recorder = _active
            if recorder is not None and isinstance(obj, dataset_type):
                record = recorder._hdf5_by_fileno.get(obj.id.fileno)
                if record is not None:
                    key = _dataset_key(group, name, file_type)
                    if key is not None:
                        datasets = record["datasets"]
                        datasets[key] = datasets.get(key, 0) + 1
            return obj

        self._patch(module.File, "__init__", __init__)
        self._patch(module.Group, "__getitem__", __getitem__)

    def _hdf5_opened(self, f: Any) -> None:
        path = os.path.abspath(f.filename)
        record = self._hdf5.get(path)
        if record is None:
            if len(self._hdf5) >= MAX_FILES:
                return
            record = self._hdf5[path] = {"opens": 0, "datasets": {}}
        record["opens"] += 1
        self._hdf5_by_fileno[f.id.fileno] = record  # file numbers are reused: the latest open wins

    def _hook_sqlalchemy(self, module: Any) -> None:
        original = module.create_engine

        def create_engine(*args: Any, **kwargs: Any) -> Any:
            engine = original(*args, **kwargs)
            if _active is not None and not _called_from(("trainmedic.data",)):
                _active._engine_created(engine)
            return engine

        self._patch(module, "create_engine", create_engine)
        engine_module = sys.modules.get("sqlalchemy.engine")
        if engine_module is not None and getattr(engine_module, "create_engine", None) is original:
            self._patch(engine_module, "create_engine", create_engine)

        engines = self._engines

        def before_cursor_execute(
            conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, executemany: bool
        ) -> None:
            if not executemany:
                db = engines.get(id(conn.engine))
                if db is not None:
                    db.run(statement, parameters)

        target = module.engine.Engine
        module.event.listen(target, "before_cursor_execute", before_cursor_execute)
        self._sa_listener = (module.event, (target, before_cursor_execute))

    def _engine_created(self, engine: Any) -> None:
        url = engine.url
        sqlite_path = None
        if (
            url.get_backend_name() == "sqlite"
            and url.database
            and url.database != ":memory:"
            and not url.database.startswith("file:")
        ):
            sqlite_path = os.path.abspath(url.database)
            text = f"sqlite:///{sqlite_path}"
        else:
            text = url.render_as_string(hide_password=True)
        db = self._databases.get(text)
        if db is None:
            db = self._databases[text] = DatabaseStats(text, "sqlalchemy", sqlite_path)
        db.connects += 1
        self._engines[id(engine)] = db

    def _hook_torch(self, module: Any) -> None:
        dataloader = sys.modules.get("torch.utils.data.dataloader")
        if dataloader is None:
            return
        original = dataloader.DataLoader.__init__

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original(loader, *args, **kwargs)
            # Keras on the torch backend wraps fit's input in a DataLoader of its own: not the
            # user's Dataset, and no data.load() can be built from it.
            if _active is not None and not _called_from(("trainmedic.data", "keras")):
                _active._dataloader_built(loader)

        self._patch(dataloader.DataLoader, "__init__", __init__)

    def _dataloader_built(self, loader: Any) -> None:
        dataset = loader.dataset
        batch_size = loader.batch_size
        if batch_size is None:
            batch_size = getattr(loader.batch_sampler, "batch_size", None)
        try:
            length = len(dataset)
        except TypeError:
            length = None
        kind = type(dataset)
        use = DatasetUse(
            f"{kind.__module__}.{kind.__qualname__}",
            _name_of(dataset),
            batch_size,
            int(loader.num_workers or 0),
            length,
        )
        if use not in self._datasets and len(self._datasets) < MAX_FILES:
            self._datasets.append(use)
        if use.num_workers > 0 and self.worker_loader is None:
            self.worker_loader = (dataset, use.num_workers, batch_size)

    def _hook_trainmedic_data(self, module: Any) -> None:
        original = module.load

        def load(source: Any, *args: Any, **kwargs: Any) -> Any:
            loader = original(source, *args, **kwargs)
            if _active is not None and len(_active._loaders) < MAX_FILES:
                _active._loaders.append(
                    LoaderUse(_describe(source), loader.tier, loader.batch_size, str(loader.device))
                )
            return loader

        self._patch(module, "load", load)


def _dataset_key(group: Any, name: Any, file_type: type) -> str | None:
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    if not isinstance(name, str):
        return None  # a reference or an object id: no name to give data.load
    if name.startswith("/"):
        return name.strip("/")
    if type(group) is file_type:
        return name.strip("/")
    return f"{group.name.strip('/')}/{name.strip('/')}".strip("/")


def _called_from(prefixes: tuple[str, ...]) -> bool:
    """True when a frame of a module under one of ``prefixes`` is on the caller's stack."""
    frame: FrameType | None = sys._getframe(2)
    depth = 0
    while frame is not None and depth < 200:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str):
            for prefix in prefixes:
                if module == prefix or module.startswith(prefix + "."):
                    return True
        frame = frame.f_back
        depth += 1
    return False


def _name_of(obj: Any) -> str | None:
    """The name the user's code holds ``obj`` by, in the innermost user frame on the stack."""
    frame: FrameType | None = sys._getframe(2)
    depth = 0
    while frame is not None and depth < 200:
        if is_user_file(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in scope.items():
                    if value is obj and name.isidentifier() and not name.startswith("_"):
                        return name
            return None
        frame = frame.f_back
        depth += 1
    return None


def _describe(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return re.sub(r"(://[^/:@\s]*):[^@/\s]*@", r"\1:***@", os.fspath(source))  # no password kept
    if isinstance(source, dict):
        return "dict of arrays"
    kind = type(source)
    return f"{kind.__module__}.{kind.__qualname__}"
