"""Save a large state (NumPy arrays, a dict of tensors or a module) once and report, as JSON on stdout, the peak RSS before and after.

ru_maxrss is the process's peak resident memory: if a save serialised the state into memory
before writing it (pickle.dumps, BytesIO), the peak would grow by about the state's size.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys

import numpy as np

from trainmedic.checkpoint import Checkpointer


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--kind", choices=("numpy", "tensors", "module"), default="numpy")
    p.add_argument(
        "--torch", action="store_true", help="import torch: the Checkpointer then writes with torch.save"
    )
    p.add_argument("--progress")
    args = p.parse_args()
    if args.torch or args.kind != "numpy":
        import torch
    ckpt = Checkpointer(args.dir, every=1)
    ckpt.restore()
    # Filled so that every page is resident (np.zeros pages would not count).
    n = args.mb * 1_000_000 // 16
    if args.kind == "numpy":
        state = {"a": np.arange(n, dtype=np.float64), "b": np.ones(n)}
        nbytes = state["a"].nbytes + state["b"].nbytes
    elif args.kind == "tensors":
        state = {"a": torch.arange(n, dtype=torch.float64), "b": torch.ones(n, dtype=torch.float64)}
        nbytes = 16 * n
    else:
        side = int((args.mb * 1_000_000 / 4) ** 0.5)
        state = torch.nn.Linear(side, side, bias=False)
        nbytes = side * side * 4
    small = {"step": 0}
    ckpt.save(1, small=small)  # the first save: warms up the code path with a tiny state
    before = peak_bytes()
    written = ckpt.save(2, force=True, state=state)
    after = peak_bytes()
    info = ckpt.last_save
    latest = ckpt.latest()
    print(
        json.dumps(
            {
                "written": written,
                "state_bytes": int(nbytes),
                "serializer": json.load(open(f"{info.path}/manifest.json"))["files"]["state.pt"][
                    "serializer"
                ],
                "peak_before": before,
                "peak_after": after,
                "seconds": info.seconds,
                "bytes": info.bytes,
                "latest_save_seconds": latest.save_seconds,
                "latest_bytes": latest.bytes,
                "path": str(info.path),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
