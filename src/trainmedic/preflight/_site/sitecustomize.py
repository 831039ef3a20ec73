"""Injected into every ``trainmedic preflight`` child before the user's code runs (stdlib only).

``trainmedic preflight`` puts this file's folder first on the child's PYTHONPATH, so Python's
``site`` imports it at start-up. When ``TRAINMEDIC_PREFLIGHT_DIR`` is set it:

- installs the ConfigTracker (configs.py), so config keys read/set are recorded;
- on SIGUSR2 dumps every thread's stack: faulthandler (C level, works even inside a long native
  call) to ``faulthandler.txt``, then at the next bytecode a Python-level dump of the main thread
  first to ``stack.txt``, after the config snapshot to ``configs.json`` and the loops around the
  project's frames, with how far each got (loop_progress.py), to ``loops.json`` (the parent
  waits for ``stack.txt``, so everything else is on disk by then);
- writes ``configs.json`` at exit too, and ``exception.json`` for an uncaught exception;
- when torch is imported, appends a timestamp per optimizer step to ``steps.txt`` (the measured
  CPU speed; the Checkpointer's own events give the time spent saving, and with
  ``TRAINMEDIC_PREFLIGHT_HOLD_AT`` it freezes itself after the save the resume check kills at).

Only the first Python process of the command does this (its pid is exported); processes it starts
(spawned DataLoader workers, subprocesses) run as they would without us. Anything that goes wrong
here is written to ``site_errors.txt`` and never reaches the user's program. Finally a
sitecustomize of the user's own, shadowed by this one, is run.
"""

from __future__ import annotations

import os
import sys

# Not typing.TYPE_CHECKING: this file imports nothing it does not need before the user's code
# (type checkers read a module-level TYPE_CHECKING as True all the same).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import TextIO

    from trainmedic.preflight.configs import ConfigTracker

# The environment variables and file names below are child.py's constants, spelt out: this file
# must not import trainmedic. tests/preflight/test_preflight_protocol.py holds them equal.


def _main() -> None:
    directory = os.environ.get("TRAINMEDIC_PREFLIGHT_DIR")
    owner = os.environ.get("TRAINMEDIC_PREFLIGHT_PID")
    if directory and owner in (None, "", str(os.getpid())):
        os.environ["TRAINMEDIC_PREFLIGHT_PID"] = str(os.getpid())
        _Child(directory).install()
    _chain_user_sitecustomize()


class _Child:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.tracker: ConfigTracker | None = None
        self.timeline: TextIO | None = None
        self.loops: ModuleType | None = None  # loop_progress.py

    def install(self) -> None:
        for step in (
            self._pid,
            self._configs,
            self._loop_reader,
            self._signals,
            self._excepthook,
            self._imports,
        ):
            try:
                step()
            except Exception as exc:  # never break the user's program over our own instrumentation
                self._note(f"{step.__name__}: {type(exc).__name__}: {exc}")

    # -- what the parent reads -------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _note(self, text: str) -> None:
        try:
            with open(self._path("site_errors.txt"), "a", encoding="utf-8") as out:
                out.write(text + "\n")
        except OSError:
            pass

    def _atomic_write(self, name: str, text: str) -> None:
        tmp = self._path(f".{name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, self._path(name))  # the parent never reads half a file

    def _pid(self) -> None:
        # The command may be a wrapper (bash run.sh): SIGUSR2 goes to this process, not the wrapper.
        self._atomic_write("site.pid", str(os.getpid()))

    # -- config tracking -------------------------------------------------------------------

    def _configs(self) -> None:
        configs = _load_module(os.environ.get("TRAINMEDIC_PREFLIGHT_PACKAGE", ""), "configs")
        root = os.environ.get("TRAINMEDIC_PREFLIGHT_ROOT") or os.getcwd()
        self.tracker = tracker = configs.ConfigTracker(root)
        tracker.install()
        import atexit

        atexit.register(self._write_configs)

    def _write_configs(self) -> None:
        if self.tracker is None:
            return
        try:
            import json

            self._atomic_write("configs.json", json.dumps(self.tracker.snapshot()))
        except Exception as exc:
            self._note(f"configs snapshot: {type(exc).__name__}: {exc}")

    # -- where is it stuck -----------------------------------------------------------------

    def _loop_reader(self) -> None:
        # Loaded now, not in the signal handler: an import there could wait on a lock the
        # interrupted code holds.
        self.loops = _load_module(os.environ.get("TRAINMEDIC_PREFLIGHT_PACKAGE", ""), "loop_progress")

    def _write_loops(self, frame) -> None:
        if self.loops is None:
            return
        try:
            import json

            root = os.environ.get("TRAINMEDIC_PREFLIGHT_ROOT") or os.getcwd()
            self._atomic_write("loops.json", json.dumps(self.loops.read_loops(frame, root)))
        except Exception as exc:
            self._note(f"loop progress: {type(exc).__name__}: {exc}")

    def _signals(self) -> None:
        import faulthandler
        import signal

        signal.signal(signal.SIGUSR2, self._dump)
        # Registered after the Python handler and chained to it: the C-level dump happens at once,
        # the Python one at the next bytecode (never, if the main thread is stuck in native code).
        self._faulthandler_file = open(self._path("faulthandler.txt"), "w")
        faulthandler.register(signal.SIGUSR2, file=self._faulthandler_file, all_threads=True, chain=True)

    def _dump(self, signum, frame) -> None:
        self._write_configs()
        self._write_loops(frame)
        try:
            import _thread

            main = _thread.get_ident()  # Python runs signal handlers in the main thread
            lines = ["Main thread (most recent call last):", *_format_stack(frame)]
            for ident, other in _current_frames().items():
                if ident != main:
                    lines += [f"Thread {ident} (most recent call last):", *_format_stack(other)]
            self._atomic_write("stack.txt", "\n".join(lines) + "\n")
        except Exception as exc:
            self._note(f"stack dump: {type(exc).__name__}: {exc}")

    # -- why did it fail -------------------------------------------------------------------

    def _excepthook(self) -> None:
        previous = sys.excepthook

        def hook(kind, value, tb):
            try:
                self._write_exception(kind, value, tb)
            except Exception as exc:
                self._note(f"excepthook: {type(exc).__name__}: {exc}")
            previous(kind, value, tb)

        sys.excepthook = hook

    def _write_exception(self, kind, value, tb) -> None:
        import json
        import traceback

        frames = [
            {"path": f.filename, "line": f.lineno, "function": f.name, "source": f.line or ""}
            for f in traceback.extract_tb(tb)
        ]
        text = "".join(traceback.format_exception_only(kind, value))
        self._atomic_write(
            "exception.json", json.dumps({"type": kind.__name__, "text": text, "frames": frames})
        )

    # -- speed, and the resume check's kill point ------------------------------------------

    def _imports(self) -> None:
        self.timeline = open(self._path("steps.txt"), "a", buffering=1, encoding="utf-8")
        watch = _ImportWatch({"torch": self._on_torch})
        sys.meta_path.insert(0, watch)

    def _on_torch(self, torch) -> None:
        import importlib
        import time

        timeline = self.timeline
        if timeline is None:  # _imports opens it before it watches for torch
            return

        def after_step(optimizer, args, kwargs):
            timeline.write(f"step {id(optimizer)} {time.perf_counter():.6f}\n")

        # torch/optim/__init__.py deletes its `optimizer` attribute; the module is loaded all the same.
        optim = importlib.import_module("torch.optim.optimizer")
        optim.register_optimizer_step_post_hook(after_step)


class _ImportWatch:
    """A meta-path finder that runs a callback right after a watched module's first import.

    It costs nothing for other modules and never imports anything itself, so torch is not loaded
    early for a script that never imports it.
    """

    def __init__(self, callbacks) -> None:
        self.callbacks = dict(callbacks)

    def find_spec(self, name, path=None, target=None):
        callback = self.callbacks.get(name)
        if callback is None:
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        watch = self

        def exec_module(module):
            original(module)
            watch.callbacks.pop(name, None)
            if not watch.callbacks and watch in sys.meta_path:
                sys.meta_path.remove(watch)
            try:
                callback(module)
            except Exception as exc:
                _note_somewhere(f"after importing {name}: {type(exc).__name__}: {exc}")

        loader.exec_module = exec_module
        return spec


def _format_stack(frame) -> list[str]:
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return [
        f'  File "{f.f_code.co_filename}", line {f.f_lineno}, in {f.f_code.co_name}' for f in reversed(frames)
    ]


def _load_module(package_dir: str, module: str):
    """A stdlib-only module of trainmedic.preflight (configs.py, loop_progress.py) without
    importing trainmedic's package (numpy, rich...) into the user's process."""
    import importlib

    if package_dir and os.path.isfile(os.path.join(package_dir, module + ".py")):
        import types

        name = "_trainmedic_preflight_child"
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [package_dir]  # configs.py's relative imports find its siblings
            sys.modules[name] = package
        try:
            return importlib.import_module(f"{name}.{module}")
        except ImportError:
            pass
    return importlib.import_module(f"trainmedic.preflight.{module}")


def _note_somewhere(text: str) -> None:
    directory = os.environ.get("TRAINMEDIC_PREFLIGHT_DIR")
    if directory:
        try:
            with open(os.path.join(directory, "site_errors.txt"), "a", encoding="utf-8") as out:
                out.write(text + "\n")
        except OSError:
            pass


def _chain_user_sitecustomize() -> None:
    """Run the sitecustomize this file shadows (a venv's or the user's), as Python would have."""
    try:
        import importlib.util
        from importlib.machinery import PathFinder

        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        _note_somewhere(f"the shadowed sitecustomize raised {type(exc).__name__}: {exc}")


if __name__ == "sitecustomize":
    _main()


def _current_frames():
    # sys._current_frames() can deadlock on Python 3.11 when a garbage collection starts inside
    # it (CPython gh-106883): collections are held off for the call, as trainmedic._os does.
    import gc

    if sys.version_info >= (3, 12) or not gc.isenabled():
        return sys._current_frames()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        gc.enable()
