"""How one experiment's command becomes a child process: argv, environment, files it leaves.

The protocol between the parent and the injected sitecustomize (``_site/sitecustomize.py``) and
the Checkpointer's preflight mode lives here, in one place: the environment variables and the
names of the files a child writes into its ``TRAINMEDIC_PREFLIGHT_DIR``. The Checkpointer's two
variables come from its own side (``preflight_log``); the sitecustomize may not import trainmedic,
so it spells the names out and a test holds them equal to these.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from trainmedic.checkpoint.preflight_log import ENV, HOLD_ENV

#: Set for every child; the Checkpointer's preflight mode and the sitecustomize key off it.
DIR_VAR = ENV
#: The project root: the config tracker follows only files under it.
ROOT_VAR = "TRAINMEDIC_PREFLIGHT_ROOT"
#: Where configs.py lives, so the child loads it without importing trainmedic as a whole.
PACKAGE_VAR = "TRAINMEDIC_PREFLIGHT_PACKAGE"
#: Run B of the resume check: the Checkpointer freezes right after its first save of this step or later.
HOLD_VAR = HOLD_ENV
#: Exported by the first Python process of the command; its own children leave tracking alone.
PID_VAR = "TRAINMEDIC_PREFLIGHT_PID"

#: The folder holding only the injected sitecustomize.py.
SITE_DIR = str(Path(__file__).resolve().parent / "_site")
PACKAGE_DIR = str(Path(__file__).resolve().parent)

# Files in a child's TRAINMEDIC_PREFLIGHT_DIR.
EVENTS = "events.jsonl"  # the Checkpointer's: init, restore, save
STACK = "stack.txt"  # Python-level dump on SIGUSR2, main thread first
LOOPS = "loops.json"  # on SIGUSR2, before STACK: the project's loops on the stack, how far each got
FAULTHANDLER = "faulthandler.txt"  # C-level dump on SIGUSR2
CONFIGS = "configs.json"  # ConfigTracker.snapshot(), at exit and on SIGUSR2
EXCEPTION = "exception.json"  # the uncaught exception: type, text, frames
TIMELINE = "steps.txt"  # "step <optimizer id> <t>" lines (save times are in EVENTS)
SITE_PID = "site.pid"  # the pid of the process that installed the instrumentation
SITE_ERRORS = "site_errors.txt"  # what the instrumentation could not do
STDOUT, STDERR = "stdout.txt", "stderr.txt"

_PYTHONS = {"python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"}


def child_argv(command: str) -> list[str]:
    """The command split as a shell would; a leading ``python`` is this very interpreter.

    ``python`` on PATH may be another environment (or none at all); the user ran trainmedic from
    the environment they train in, so that one runs the experiment.
    """
    argv = shlex.split(command)
    if argv and argv[0] in _PYTHONS:
        argv[0] = sys.executable
    return argv


def child_env(
    directory: Path, root: Path, extra: Mapping[str, str], hold_at: int | None = None
) -> dict[str, str]:
    """The user's environment, plus the experiment's ``env``, plus the preflight protocol."""
    env = {**os.environ, **extra}
    for name in (HOLD_VAR, PID_VAR):
        env.pop(name, None)  # trainmedic preflight run from inside a preflight child: start clean
    user_path = env.get("PYTHONPATH", "")
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": "",  # tiny steps on the CPU: a preflight must not need the GPU it plans for
            "PYTHONUNBUFFERED": "1",
            DIR_VAR: str(directory),
            ROOT_VAR: str(root),
            PACKAGE_VAR: PACKAGE_DIR,
            "PYTHONPATH": SITE_DIR + (os.pathsep + user_path if user_path else ""),
        }
    )
    if hold_at is not None:
        env[HOLD_VAR] = str(hold_at)
    return env
