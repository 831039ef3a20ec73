"""Which files a ``trainmedic lint PATH...`` call reads."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trainmedic.errors import LintError
from trainmedic.lint.model import FileProblem
from trainmedic.userfiles import UserFiles

if TYPE_CHECKING:
    from trainmedic.lint.config import LintConfig

#: Folders that hold other people's code or build output, never the user's training code.
_SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        "build",
        "dist",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "site-packages",
        ".eggs",
        ".ipynb_checkpoints",
    }
)


def discover(paths: list[str], config: LintConfig | None = None) -> tuple[list[str], list[FileProblem]]:
    """The Python files under ``paths``, sorted and without repeats, and the files given by name
    that are not Python (reported, then skipped). A path that does not exist is a usage error.

    ``config``'s ``exclude`` skips what the walk finds; a path given by name is still read, as
    ruff does, unless ``force_exclude`` (pre-commit names every file it hands over)."""
    found: list[str] = []
    problems: list[FileProblem] = []
    excluded = config.excluded if config is not None and config.exclude else None
    force_exclude = config is not None and config.force_exclude
    for given in paths:
        path = Path(given)
        if path.exists() and excluded and force_exclude and excluded(given, with_parents=True):
            continue
        if path.is_dir():
            found.extend(_walk(path, excluded))
        elif path.is_file():
            if _is_python(path):
                found.append(str(path))
            else:
                problems.append(
                    FileProblem(
                        str(path), "not a Python file (no .py suffix or python shebang), skipped", True
                    )
                )
        else:
            raise LintError(
                f"no such file or directory: {given!r}; give Python files or folders that hold them"
            )
    # One file given twice, or reached through a symlink, is linted once, under its first spelling.
    unique: dict[str, str] = {}
    for name in sorted(found):
        unique.setdefault(os.path.realpath(name), name)
    return sorted(unique.values()), problems


def _walk(root: Path, excluded: Callable[[str], bool] | None = None) -> list[str]:
    files = []
    # Installed code below the root (a site-packages, the interpreter's own folders) is not the
    # user's, by the same check run and preflight use; a root that is installed code itself was
    # asked for by name and is read whole.
    user = UserFiles([root], anywhere=True)
    below_library = str(root) not in user
    for folder, dirs, names in os.walk(root):
        # A virtualenv by any name (env/ is also a common name for RL environments' code).
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in _SKIPPED_DIRS
            and not d.endswith(".egg-info")
            and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))
            and (below_library or os.path.join(folder, d) in user)
            and not (excluded and excluded(os.path.join(folder, d)))
        )
        for name in names:
            path = os.path.normpath(os.path.join(folder, name))
            if name.endswith((".py", ".pyw")) and not (excluded and excluded(path)):
                files.append(path)
    return files


def _is_python(path: Path) -> bool:
    if path.suffix in (".py", ".pyw", ".pyi"):  # pre-commit's `types: [python]` includes stubs
        return True
    if path.suffix:
        return False
    try:
        with path.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first
