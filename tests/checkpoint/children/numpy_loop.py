"""A deterministic numpy-only training loop checkpointed with trainmedic.checkpoint.Checkpointer.

Without torch imported the Checkpointer serialises with pickle, so this child starts in a few
hundred milliseconds: the kill tests can afford dozens of them. Every random draw comes from an
RNG the Checkpointer captures (Python's and NumPy's global RNGs with rng=True, plus a
numpy Generator and a random.Random passed as objects), so a killed-and-resumed run ends
bit-identical to an uninterrupted one.

Progress lines: ``restored <step> <skipped> <consistent> <torch_imported>``, ``step <n> <written>``
after every save() call, ``stopped <n>``, ``preempted <code> <step> <time>``, ``message <json>``,
``deadline <epoch seconds>``, ``done <step>``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import pickle
import random
import sys
import time

import numpy as np
from childkit import Progress, parse_every

# Imported before the seeds are set, in --plain runs too, as a training script would: importing
# trainmedic draws from Python's global RNG (rich's Style link ids), which must not make the
# reference run differ from the checkpointed one.
from trainmedic.checkpoint import Checkpointer, Preempted

CHUNK = 4096


def train_step(state: dict, gen: np.random.Generator, rnd: random.Random, step: int) -> None:
    w = state["w"]
    start = int(gen.integers(0, w.size - CHUNK))
    w[start : start + CHUNK] += gen.standard_normal(CHUNK)
    state["acc"] += random.random() + float(np.random.rand()) + rnd.random()
    w[step % w.size] += state["acc"]
    state["history"].append(step)


def snapshot(state: dict, gen: np.random.Generator, rnd: random.Random) -> dict:
    return {
        "w": state["w"],
        "acc": state["acc"],
        "history": state["history"],
        "gen": gen.bit_generator.state,
        "rnd": rnd.getstate(),
        "py": random.getstate(),
        "np": np.random.get_state(),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir")
    p.add_argument("--progress")
    p.add_argument("--total", type=int, default=20)
    p.add_argument("--size-mb", type=float, default=1.0)
    p.add_argument("--every", default="1")
    p.add_argument("--keep-last", type=int, default=2)
    p.add_argument("--plain", action="store_true", help="no Checkpointer at all: the uninterrupted reference")
    p.add_argument("--out", help="pickle the final state here")
    p.add_argument("--exit-on-stop", type=int, default=1)
    p.add_argument("--deadline-in", type=float, help="deadline = now + this many seconds, as a datetime")
    p.add_argument("--step-seconds", type=float, default=0.0, help="simulated compute per step")
    args = p.parse_args()

    random.seed(0)
    np.random.seed(0)
    gen = np.random.default_rng(0)
    rnd = random.Random(0)
    state = {"w": np.zeros(max(int(args.size_mb * 1e6 / 8), 2 * CHUNK)), "acc": 0.0, "history": []}
    progress = Progress(args.progress)

    ckpt = None
    start = 0
    if not args.plain:
        kwargs: dict = {
            "keep_last": args.keep_last,
            "every": parse_every(args.every),
            "exit_on_stop": bool(args.exit_on_stop),
        }
        if args.deadline_in is not None:
            deadline = dt.datetime.now() + dt.timedelta(seconds=args.deadline_in)
            progress.log("deadline", repr(deadline.timestamp()))
            kwargs["deadline"] = deadline
        ckpt = Checkpointer(args.dir, **kwargs)
        start = ckpt.restore(state=state, gen=gen, rnd=rnd)
        skipped = len(ckpt.resumed.skipped) if ckpt.resumed is not None else 0
        consistent = state["history"] == list(range(1, start + 1))
        progress.log("restored", start, skipped, int(consistent), int("torch" in sys.modules))

    try:
        for i in range(start, args.total):
            train_step(state, gen, rnd, i + 1)
            if args.step_seconds:
                time.sleep(args.step_seconds)  # the loop's compute, not a synchronisation
            if ckpt is None:
                continue
            written = ckpt.save(i + 1, state=state, gen=gen, rnd=rnd)
            progress.log("step", i + 1, int(written))
            if ckpt.stopping and not args.exit_on_stop:
                progress.log("stopped", i + 1, int(written))
                return 0
    except SystemExit as exc:
        if ckpt is not None and isinstance(exc, Preempted):
            progress.log("preempted", exc.code, exc.step, repr(time.time()))
            progress.log_json("message", exc.message)
        raise

    if args.out:
        with open(args.out, "wb") as f:
            pickle.dump(snapshot(state, gen, rnd), f)
    progress.log("done", args.total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
