"""Files named on the command line (``--json``, ``--html``): checked before the work that fills them.

A report is written after the script, the plan or every experiment has run; a path that cannot
take it must be refused first, not after an hour of training with a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: The exit code for a path refused here, as for any other bad argument.
USAGE = 2


def output_problem(outputs: Iterable[tuple[str, Path | None]]) -> str | None:
    """``"--json PATH: why"`` for the first (flag, path) that cannot be written, or None."""
    for flag, path in outputs:
        if path is None:
            continue
        problem = unwritable(path, flag)
        if problem:
            return f"{flag} {path}: {problem}"
    return None


def unwritable(path: Path, flag: str) -> str | None:
    """Why the file of ``flag`` (``--json``) could not be written to ``path``, or None."""
    folder = path.parent
    if not folder.is_dir():
        if folder.exists():
            return f"{folder} is a file, not a folder; give a path in a folder"
        return f"the folder {folder} does not exist; create it or give another path"
    if path.is_dir():
        return f"is a folder; give a file name, e.g. {flag} report.{flag.lstrip('-')}"
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "cannot write there (permission denied); give a path in a folder you can write to"
    return None
