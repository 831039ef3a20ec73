"""Which config keys a run read and which ones its code overrode (a CLI override that reaches one copy of a setting and misses the others).

``--train-iters 5`` set ``nsgf_training.num_iterations`` and ``nsf_training.num_iterations`` but
not ``time_predictor.num_iterations = 40000``, and the smoke test hung for hours in phase 3. To
catch that, every preflight child runs ``ConfigTracker(project_root).install()`` before the
user's code: ``json.load``, ``tomllib.load`` (``tomli.load``) and PyYAML's ``safe_load`` /
``load`` / ``full_load`` / ``unsafe_load`` then return, for a ``.json .yaml .yml .toml`` file of
the project, :class:`TrackedDict` / :class:`TrackedList` trees that record reads and writes per
dotted key (``time_predictor.num_iterations``, list items as ``layers.0.width``).
``tracker.snapshot()`` is JSON for the parent; :func:`analyse` turns it into findings.

This module is imported inside every user process before their code runs, so it imports only
the standard library and nothing from trainmedic (it can be loaded by path), and tracking never
changes what the program computes: values compare equal, ``isinstance(x, dict/list)`` holds,
``json.dumps``, ``yaml.safe_dump``, ``copy``/``deepcopy`` work, and pickles hold plain dicts and
lists, so they unpickle without trainmedic.

What counts (decisions; the limits are listed in ``ConfigTracker``'s docstring):

- read: ``x[k]``, ``get`` / ``setdefault`` / ``pop`` of a present key, ``items()`` / ``values()``
  (every child handed out), ``dict(x)`` / ``{**x}`` / ``f(**x)`` (they go through ``keys()`` +
  ``x[k]``), ``json.dumps`` / ``yaml.safe_dump`` / ``pprint`` (they call ``items()``). Any access
  to a list reads the list as one setting: lists of numbers reach C code (torch, numpy, ``join``)
  wholesale. ``k in x``, ``len``, ``keys()`` and iterating keys are *not* reads: they ask whether
  a key exists, not what it says.
- write: ``x[k] = v`` (also with the same value: the override happened; the snapshot shows
  old == new), ``update``, ``|=``, ``del``, ``pop``, ``popitem``, ``clear`` and ``setdefault`` of a
  missing key (op ``"default"``: filling a gap is not an override); any in-place list change is a
  write of the whole list. Values the program assigns are stored as given, never wrapped.
- ``copy()`` / ``copy.copy`` / ``copy.deepcopy`` return tracked copies that keep recording under
  the same keys; pickling (``pickle``, ``torch.save``, spawn workers) hands plain containers to
  code that cannot be followed, so it marks the file ``copied`` and never-read is not reported;
  so does ``os.fork`` (forked DataLoader workers read their copy where the parent cannot see).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from dataclasses import dataclass, field

# Not typing.TYPE_CHECKING: this module loads before the user's code and imports no more than
# it needs (type checkers read a module-level TYPE_CHECKING as True all the same).
TYPE_CHECKING = False
if TYPE_CHECKING or __package__:
    from .config_tracked import MAX_NODES, TrackedDict, TrackedList, _FileRecord, _TooBig, wrap
else:  # loaded by its path alone, as a child that must not import trainmedic may do
    import importlib.util as _util

    _spec = _util.spec_from_file_location(
        "_trainmedic_config_tracked",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "config_tracked.py"),
    )
    _tracked = _util.module_from_spec(_spec)
    sys.modules[_spec.name] = _tracked
    _spec.loader.exec_module(_tracked)
    MAX_NODES, TrackedDict, TrackedList = _tracked.MAX_NODES, _tracked.TrackedDict, _tracked.TrackedList
    _FileRecord, _TooBig, wrap = _tracked._FileRecord, _tracked._TooBig, _tracked.wrap

FORMAT = "trainmedic.configs/1"
SUFFIXES = (".json", ".yaml", ".yml", ".toml")
#: A bigger file is data (COCO annotations, a vocabulary), not a config: never wrapped.
MAX_BYTES = 1 << 20
#: Directories of installed code: a library reading its own config is none of our business.
_SKIP_DIRS = frozenset(
    {".venv", "venv", "site-packages", "dist-packages", ".git", "node_modules", "__pycache__", ".tox", ".nox"}
)
_local = threading.local()
_active: list[ConfigTracker] = []
_fork_hook: list[bool] = []  # registered in this process (os.register_at_fork cannot be undone)


@dataclass(frozen=True)
class ConfigFinding:
    """One config problem: ``kind`` is ``"missed_override"`` or ``"never_read"``; ``line`` is the
    key's line in ``file`` (relative to the project root), None when it cannot be told."""

    kind: str
    file: str
    key: str
    line: int | None
    message: str
    related: tuple[str, ...] = field(default=())


class ConfigTracker:
    """Track the config files under ``project_root`` that the program loads.

    Only loads called from the project's own code are tracked: a library that loads a project
    file (OmegaConf, transformers) keeps what it reads to itself.

    Limits: only a stream with a ``.name`` is tracked (``yaml.safe_load(path.read_text())``,
    ``json.loads`` and ``tomllib.loads`` get text, not a file, and stay untracked); files over
    1 MiB, under ``.venv``/``site-packages``/the interpreter's prefix or
    ``$TRAINMEDIC_PREFLIGHT_DIR`` are left alone; only plain ``dict``/``list`` nodes are wrapped
    (an ``OrderedDict`` from an ``object_pairs_hook`` stays as it is); ``type(x) is dict`` is
    False for a tracked dict, so a serializer that dispatches on the exact type (ruamel.yaml;
    PyYAML gets representers from ``install()``) may refuse it; a loader called from inside
    another tracked load (a YAML ``!include`` constructor) is not tracked; keys containing dots
    make dotted paths ambiguous.
    """

    def __init__(self, project_root: str) -> None:
        self.root = os.path.realpath(os.fspath(project_root))
        self._records: dict[str, _FileRecord] = {}
        # (module, loader name, original loader), or (PyYAML representer table, tracked class, None)
        self._patched: list[tuple[object, str, object] | tuple[dict, type, None]] = []
        self._callers: dict[str, bool] = {}  # code file -> is it the project's own code
        excluded = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        if os.environ.get("TRAINMEDIC_PREFLIGHT_DIR"):
            excluded.add(os.environ["TRAINMEDIC_PREFLIGHT_DIR"])
        # Only those inside the project (a venv in it): /usr as sys.prefix must not hide /usr/src/app.
        inside = (os.path.realpath(p) + os.sep for p in excluded if p)
        self._excluded = tuple(p for p in inside if not (self.root + os.sep).startswith(p))

    def install(self) -> None:
        """Patch the loaders (PyYAML and tomli only where importable). Idempotent."""
        if self in _active:
            return
        if _active:
            raise RuntimeError("another ConfigTracker is installed; call its uninstall() first")
        import json

        self._patch(json, "load")
        if sys.version_info >= (3, 11):
            import tomllib

            self._patch(tomllib, "load")
        for name in ("tomli", "yaml"):
            try:
                module = __import__(name)
            except Exception:  # noqa: BLE001 - absent or broken: nothing of theirs to track
                continue
            for attr in ("load", "safe_load", "full_load", "unsafe_load") if name == "yaml" else ("load",):
                if callable(getattr(module, attr, None)):
                    self._patch(module, attr)
            if name == "yaml":
                self._register_yaml(module)
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_before_fork)
            _fork_hook.append(True)
        _active.append(self)

    def uninstall(self) -> None:
        """Put the original loaders (and PyYAML representers) back."""
        for owner, attr, original in reversed(self._patched):
            if isinstance(owner, dict):
                owner.pop(attr, None)
            elif isinstance(attr, str):
                setattr(owner, attr, original)
        self._patched.clear()
        if self in _active:
            _active.remove(self)

    def snapshot(self) -> dict:
        """JSON-able state; safe to call from a signal handler or ``atexit`` at any moment.

        Besides the documented fields: ``root`` (absolute; where analyse finds the files), ``pid``,
        and per write ``op`` ("set", "default" for setdefault of a missing key, "del"), ``writes``
        (how many), ``read_before`` / ``read_after`` (read before the first / after the last write).
        ``old`` is None for a key the file did not have, ``new`` None for a deleted one."""
        files = []
        for rel, rec in sorted(list(self._records.items()), key=lambda item: item[0]):
            sets = [
                {
                    "key": key,
                    "old": e[0],
                    "new": e[1],
                    "op": e[2],
                    "writes": e[3],
                    "read_before": e[4],
                    "read_after": e[5],
                }
                for key, e in list(rec.sets.items())
            ]
            files.append(
                {
                    "path": rel,
                    "keys": dict(rec.keys),
                    "read": sorted(list(rec.read)),
                    "set": sets,
                    "copied": rec.copied,
                }
            )
        return {"format": FORMAT, "root": self.root, "pid": os.getpid(), "files": files}

    def _forking(self) -> None:
        # A forked child (a DataLoader worker under the fork start method) gets a copy of every
        # loaded config and may read keys there that this process never sees: they are not
        # "never read". Spawned workers get theirs by pickling, which marks the file already.
        for rec in list(self._records.values()):
            rec.copied = True

    # -- internals ---------------------------------------------------------------------------

    def _patch(self, module, attr: str) -> None:
        original = getattr(module, attr)
        tracker = self

        def load(*args, **kwargs):
            if getattr(_local, "busy", False):  # yaml.safe_load calls yaml.load: track once
                return original(*args, **kwargs)
            _local.busy = True
            try:
                result = original(*args, **kwargs)
            finally:
                _local.busy = False
            stream = args[0] if args else kwargs.get("stream", kwargs.get("fp"))
            return tracker._track(stream, result, sys._getframe(1).f_code.co_filename)

        functools.update_wrapper(load, original)
        setattr(module, attr, load)
        self._patched.append((module, attr, original))

    def _register_yaml(self, yaml) -> None:
        # SafeDumper dispatches on the exact type and refuses a dict subclass; Dumper would write
        # a !!python/object tag. Both must write what they write for the plain dict/list.
        for representer in (yaml.representer.SafeRepresenter, yaml.representer.Representer):
            table = representer.__dict__.get("yaml_representers")
            if table is None:
                continue
            for cls, base in ((TrackedDict, dict), (TrackedList, list)):
                if cls not in table and base in table:
                    table[cls] = table[base]
                    self._patched.append((table, cls, None))

    def _project_file(self, name: str) -> str | None:
        """``name`` relative to the root, or None outside it or in installed code."""
        full = os.path.realpath(name)
        if not full.startswith(self.root + os.sep) or full.startswith(self._excluded):
            return None
        rel = os.path.relpath(full, self.root)
        if any(part in _SKIP_DIRS for part in rel.split(os.sep)[:-1]):
            return None
        return rel

    def _user_code(self, filename: str) -> bool:
        """Did the project's own code call the loader? (OmegaConf or transformers loading a file
        of the project keep it: what they read from it is theirs.)"""
        known = self._callers.get(filename)
        if known is None:
            if filename.startswith("<"):  # <string>, <stdin>, a notebook cell: the user's
                known = not filename.startswith("<frozen")
            else:
                known = self._project_file(filename) is not None
            self._callers[filename] = known
        return known

    def _config_path(self, name) -> str | None:
        try:
            name = os.fsdecode(name)
        except TypeError:  # an int file descriptor or something stranger
            return None
        if not name.lower().endswith(SUFFIXES):
            return None
        rel = self._project_file(name)
        if rel is None:
            return None
        full = os.path.join(self.root, rel)
        try:
            if os.path.getsize(full) > MAX_BYTES:
                return None
        except OSError:
            return None
        return rel.replace(os.sep, "/")

    def _track(self, stream, result, caller: str):
        if type(result) is not dict and type(result) is not list:
            return result
        try:
            rel = self._config_path(getattr(stream, "name", None)) if self._user_code(caller) else None
        except Exception:  # noqa: BLE001 - tracking must never break the user's load
            return result
        if rel is None:
            return result
        rec = self._records.get(rel) or _FileRecord()
        try:
            wrapped = wrap(result, rec, "", {}, [MAX_NODES])
        except (_TooBig, RecursionError):
            return result
        self._records[rel] = rec
        return wrapped


def _before_fork() -> None:
    """os.register_at_fork hook: a no-op once every tracker is uninstalled."""
    for tracker in list(_active):
        try:
            tracker._forking()
        except Exception:  # noqa: BLE001 - never break the user's fork over our bookkeeping
            pass
