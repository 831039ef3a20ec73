"""Which source file is the user's: the one check behind every ``file:line`` trainmedic shows.

``run`` points at the user's line of a slow step, ``plan`` at the line that allocates a hotspot,
``preflight`` at the line a child failed or was stuck at, ``batch`` at the line that calls a
per-sample function: all of them ask this module. A file is the user's when it is not the
interpreter's (stdlib, ``sys.prefix``), not an installed package's (site-packages, a venv) and
not trainmedic's own.

A library folder that holds a project root does not count against that project: with the system
Python (``sys.prefix`` = ``/usr``), ``/usr/src/app/train.py`` is still the user's file, while a
venv inside the project still is not.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

__all__ = ["UserFiles", "is_user_file", "shown_path"]

_PACKAGE_FOLDERS = ("site-packages", "dist-packages")


class UserFiles:
    """Decides, per path, whether a file is the user's own source.

    ``roots`` are the project's folders (the working directory, the script's folder).
    ``anywhere`` also counts a file outside every root as the user's when no library holds it
    (a helper module on ``PYTHONPATH`` that a run imports); without it only files under a root
    are (preflight judges the project it was pointed at). ``libraries`` adds folders that hold
    library code besides this interpreter's own.
    """

    def __init__(
        self, roots: Iterable[str | Path] = (), *, anywhere: bool = False, libraries: Iterable[str] = ()
    ) -> None:
        self.roots = tuple(_folder(str(r)) for r in roots)
        self.anywhere = anywhere
        library = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
        library.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
        library.add(str(Path(__file__).resolve().parent))  # trainmedic itself
        # Another interpreter's folders: the process ``trainmedic attach`` reads may run one.
        library.update(libraries)
        folders = {_folder(p) for p in library if p}
        self.library = tuple(f for f in folders if not any(root.startswith(f) for root in self.roots))

    def __contains__(self, path: str) -> bool:
        if not path or path.startswith("<"):
            return False
        real = _folder(path)[:-1]
        parts = real.split(os.sep)
        if any(folder in parts for folder in _PACKAGE_FOLDERS):
            return False
        if any(real.startswith(lib) for lib in self.library):
            return False
        return self.anywhere or any(real.startswith(root) for root in self.roots)


_DEFAULT: UserFiles | None = None


def is_user_file(filename: str) -> bool:
    """True for the user's own source, judged from the working directory of the first call."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = UserFiles([os.getcwd()], anywhere=True)
    return filename in _DEFAULT


def shown_path(path: str, root: str | Path | None = None) -> str:
    """The path as a user types it: relative to ``root`` (the working directory by default) when
    under it, else absolute."""
    real = os.path.realpath(path)
    base = _folder(str(root) if root is not None else os.getcwd())
    if real.startswith(base):
        return real[len(base) :]
    return path if os.path.isabs(path) else real


def _folder(path: str) -> str:
    return os.path.join(os.path.realpath(path), "")
