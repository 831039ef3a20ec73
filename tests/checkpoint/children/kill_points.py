"""Restore, save the next two steps (1 and 2 in an empty directory), then save the third with file-system calls wrapped so that the Nth one kills
the process with SIGKILL before it runs (--during init: the calls of construction and restore). With --arm-at 0 nothing is killed and the calls save(3)
makes are written to --trace (JSON: [[function, args...], ...]) for the parent to enumerate.

With --torch the state holds a tensor and the files are written by torch.save instead of pickle.
keep_last=2, so save(3) writes step 3 and then deletes step 1: the wrapped calls cover writing
the data, the manifest, publishing (rename) and deleting the oldest checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys

import numpy as np
from childkit import Progress

HOOKS = {
    "os.fsync": (os, "fsync"),
    "os.replace": (os, "replace"),
    "os.rename": (os, "rename"),
    "os.unlink": (os, "unlink"),
    "os.remove": (os, "remove"),
    "os.rmdir": (os, "rmdir"),
    "os.mkdir": (os, "mkdir"),
    "os.makedirs": (os, "makedirs"),
    "shutil.rmtree": (shutil, "rmtree"),
    "shutil.move": (shutil, "move"),
}


def state_of(step: int) -> dict:
    blob = np.arange(50_000, dtype=np.int64) * step
    torch = sys.modules.get("torch")
    return {"step": step, "blob": torch.from_numpy(blob) if torch is not None else blob}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--progress")
    p.add_argument("--arm-at", type=int, default=0)
    p.add_argument("--trace")
    p.add_argument(
        "--during",
        choices=("save", "init"),
        default="save",
        help="arm the hooks for save(3) or for construction + restore",
    )
    p.add_argument(
        "--torch", action="store_true", help="import torch: the Checkpointer then writes with torch.save"
    )
    args = p.parse_args()
    if args.torch:
        import torch  # noqa: F401
    progress = Progress(args.progress)

    from trainmedic.checkpoint import Checkpointer

    calls: list[list[str]] = []
    armed = False
    kill = os.kill
    getpid = os.getpid

    def wrap(name: str, real):
        def hooked(*a, **kw):
            if armed:
                calls.append(
                    [name, *(os.fspath(x) if isinstance(x, (str, os.PathLike)) else repr(x) for x in a)]
                )
                if len(calls) == args.arm_at:
                    kill(getpid(), signal.SIGKILL)
            return real(*a, **kw)

        return hooked

    for name, (module, attr) in HOOKS.items():
        setattr(module, attr, wrap(name, getattr(module, attr)))

    armed = args.during == "init"
    ckpt = Checkpointer(args.dir, keep_last=2, every=1)
    start = ckpt.restore(state={}, extra={})
    armed = False
    extra = {"lr": 0.5}
    for step in (start + 1, start + 2):
        assert ckpt.save(step, state=state_of(step), extra=extra)
        progress.log("saved", step)
    armed = args.during == "save"
    assert ckpt.save(start + 3, state=state_of(start + 3), extra=extra)
    armed = False
    progress.log("saved", start + 3)
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(calls, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
