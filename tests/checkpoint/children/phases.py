"""A three-phase run: build a sample pool, train on it, fine-tune; checkpointed with phases.

The pool is drawn from an unseeded generator, so a pool that is rebuilt instead of restored has
a different digest. Progress lines: ``restored <step> <phase> <phases_done> <done_pool> <loaded>``,
``ran <phase> <from step>``, ``pool <sha256>``, ``step <n>``, ``done``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import numpy as np
from childkit import Progress, hold

from trainmedic.checkpoint import Checkpointer

TRAIN_END, FINETUNE_END = 30, 40


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--progress")
    p.add_argument("--hold-at", type=int, default=-1)
    args = p.parse_args()
    progress = Progress(args.progress)

    ckpt = Checkpointer(args.dir, keep_last=2, every=1)
    pool: dict = {}
    state = {"w": np.zeros(1000), "history": []}
    start = ckpt.restore(pool=pool, state=state)
    r = ckpt.resumed
    progress.log(
        "restored",
        start,
        r.phase or "-",
        ",".join(r.phases_done) or "-",
        int(ckpt.done("pool")),
        ",".join(r.loaded) or "-",
    )

    if not ckpt.done("pool"):
        progress.log("ran", "pool", start)
        pool["samples"] = np.random.default_rng().standard_normal(20_000)
        ckpt.save(0, phase="pool", pool=pool)
    progress.log("pool", hashlib.sha256(pool["samples"].tobytes()).hexdigest())

    def train(begin: int, end: int, rate: float) -> None:
        for step in range(begin, end):
            state["w"] += rate * pool["samples"][step * 10 : step * 10 + 1000]
            state["history"].append(step + 1)
            ckpt.save(step + 1, state=state)
            progress.log("step", step + 1)
            if step + 1 == args.hold_at:
                hold()

    if not ckpt.done("train"):
        progress.log("ran", "train", start)
        train(start, TRAIN_END, 0.1)
        ckpt.save(TRAIN_END, phase="train", state=state)
    if not ckpt.done("finetune"):
        progress.log("ran", "finetune", max(start, TRAIN_END))
        train(max(start, TRAIN_END), FINETUNE_END, 0.01)
        ckpt.save(FINETUNE_END, phase="finetune", state=state)
    assert state["history"] == list(range(1, FINETUNE_END + 1)), state["history"]
    progress.log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
