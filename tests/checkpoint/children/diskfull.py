"""A disk that fills: RLIMIT_FSIZE with SIGXFSZ ignored makes a write past the limit fail with
EFBIG, as a full disk fails with ENOSPC. Prints a JSON report on stdout.

--when save: the first save fits, the second (8 MB, limit 1 MB) does not.
--kind torch: the state is a tensor (torch.save, whose C++ writer rewraps the disk's error).
--when init: the limit is 0 before the Checkpointer is built: its write probe fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys

import numpy as np

from trainmedic.checkpoint import Checkpointer, CheckpointError


def limit(nbytes: int | None) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard if nbytes is None else nbytes, hard))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--when", choices=("save", "init"), required=True)
    p.add_argument("--kind", choices=("numpy", "torch"), default="numpy")
    p.add_argument("--progress")
    args = p.parse_args()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    report: dict = {}
    if args.when == "init":
        limit(0)
        try:
            Checkpointer(args.dir)
        except CheckpointError as exc:
            report["error"] = str(exc)
        limit(None)
    else:
        ckpt = Checkpointer(args.dir, every=1, keep_last=3)
        ckpt.restore(state={})
        report["first"] = ckpt.save(1, state={"w": np.ones(1000)})
        big = np.ones(1_000_000)
        if args.kind == "torch":
            import torch

            big = torch.from_numpy(big)
        limit(1_000_000)
        try:
            report["second"] = ckpt.save(2, state={"w": big})
        except CheckpointError as exc:
            report["error"] = str(exc)
        limit(None)
        report["latest"] = ckpt.latest().step
        report["entries"] = sorted(os.listdir(args.dir))
        report["after"] = ckpt.save(3, force=True, state={"w": np.ones(10)})
        report["latest_after"] = ckpt.latest().step
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
