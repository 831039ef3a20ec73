"""The entry point of a run forked by the multiprocessing fork server of ckpt_kit.fork_server().

Kept free of heavy imports: the parent pickles a reference to ``run``, so it imports this module.
"""

from __future__ import annotations

import importlib
import os
import sys


def run(module: str, argv: list[str], stdout: str, stderr: str, cwd: str) -> None:
    """Run ``module.main()`` with ``argv`` as its command line, stdout/stderr to files; exit with its code."""
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(cwd)
    for name in [n for n in os.environ if n.startswith("TRAINMEDIC_PREFLIGHT")]:
        del os.environ[name]  # as for the subprocess children: never run in preflight mode
    sys.argv = [f"{module}.py", *argv]
    code = importlib.import_module(module).main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
