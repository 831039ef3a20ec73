"""Find the user's build function from ``path/to/model.py:build`` or ``package.module:build``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from trainmedic.errors import PlanError

DEFAULT_FUNCTION = "build"


class BuildSpec(NamedTuple):
    """A spec taken apart: what to import, the function in it, and whether that is a file."""

    target: str
    function: str
    is_file: bool


def split_spec(spec: str) -> BuildSpec:
    """``model.py:build`` -> ``("model.py", "build", True)``; ``pkg.nets`` -> ``("pkg.nets", "build", False)``.

    The one reading of a spec, shared with preflight's plan child (which sets ``sys.argv`` to the
    file and names the function in its errors). No function means ``build``; the colon of a
    Windows drive (``C:\\m.py``) is no separator. A target ending in .py or holding a path
    separator is a file; anything else a module.
    """
    if not spec or not spec.strip():
        raise PlanError(
            "no build function given; expected PATH.py:FUNCTION or package.module:FUNCTION, e.g. model.py:build."
        )
    target, _, function = spec.rpartition(":") if ":" in spec.replace(":\\", "") else (spec, "", "")
    is_file = target.endswith((".py", ".pyw")) or "/" in target or "\\" in target
    return BuildSpec(target, function or DEFAULT_FUNCTION, is_file)


def load_build(spec: str, argv: Sequence[str] = ()) -> Callable[[int], Any]:
    """Import the module named by ``spec`` and return its build function.

    ``model.py`` alone means ``model.py:build``. A file is imported with its own folder first on
    ``sys.path``, as ``python model.py`` would, so its sibling imports work, and with the command
    line ``python model.py *argv`` would give it: a module that reads ``sys.argv`` when imported
    (nanoGPT's configurator, an argparse at the top) sees its own arguments, not trainmedic's. A
    module that exits while imported raises SystemExit, as under python (:func:`load_build_for`
    words it for a command; preflight's child reports it with the output before it).
    """
    target, function, is_file = split_spec(spec)
    saved = sys.argv
    sys.argv = [target, *argv]
    try:
        module = _import_file(Path(target)) if is_file else _import_module(target)
    finally:
        sys.argv = saved
    build = getattr(module, function, None)
    if build is None:
        names = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        )
        hint = f"; functions it defines: {', '.join(names)}" if names else ""
        raise PlanError(f"{target} has no function {function!r}{hint}. Name it as {target}:FUNCTION.")
    if not callable(build):
        raise PlanError(
            f"{target}:{function} is a {type(build).__name__}, not a function taking the batch size."
        )
    return build


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise PlanError(f"{path} does not exist; expected a Python file that defines build(batch_size).")
    resolved = path.resolve()
    name = f"trainmedic_plan_{resolved.stem}_{abs(hash(str(resolved))):x}"
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise PlanError(
            f"{path} cannot be imported as Python; expected a .py file that defines build(batch_size)."
        )
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    folder = str(resolved.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # kept: build() may import its siblings lazily, when called
    try:
        module_spec.loader.exec_module(module)
    except SystemExit:
        sys.modules.pop(name, None)
        raise
    except Exception as exc:
        sys.modules.pop(name, None)
        raise PlanError(
            f"importing {path} raised {type(exc).__name__}: {exc}{_line_in(exc, resolved)}"
        ) from exc
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
            raise PlanError(
                f"no module named {name!r}; expected PATH.py:FUNCTION or an importable package.module:FUNCTION."
            ) from exc
        raise PlanError(f"importing {name} raised ModuleNotFoundError: {exc}") from exc
    except Exception as exc:
        raise PlanError(f"importing {name} raised {type(exc).__name__}: {exc}") from exc


def load_build_for(command: str, spec: str, argv: Sequence[str] = ()) -> Callable[[int], Any]:
    """:func:`load_build` for ``trainmedic COMMAND``: a module that exits while imported (an
    argparse at its top, say) is a PlanError naming its line and the ``--`` fix."""
    try:
        return load_build(spec, argv)
    except SystemExit as exc:
        raise exit_at_import(spec, exc, argv, command) from None


def exit_at_import(spec: str, exc: SystemExit, argv: Sequence[str], command: str) -> PlanError:
    """The error for a build module that called ``sys.exit`` while ``trainmedic COMMAND`` imported it."""
    target, function, is_file = split_spec(spec)
    code = 0 if exc.code is None else exc.code
    where = _line_in(exc, Path(target).resolve()) if is_file else ""
    ran = " ".join([target, *argv])
    return PlanError(
        f"importing {target} called sys.exit({code!r}){where}: it reads its command line when imported, "
        f"and got `{ran}`; give it the arguments it needs after --, e.g. "
        f"trainmedic {command} {target}:{function} ... -- --config=small.py"
    )


def _line_in(exc: BaseException, path: Path) -> str:
    import traceback

    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" (at {path}:{lines[-1]})" if lines else ""
