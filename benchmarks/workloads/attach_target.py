"""A CPU training job to attach to: times its own steps and says when it is warm (``attach_overhead.py``).

The same healthy loop as ``step_bound.py`` (an MLP 512-768-768-768-10 trained with Adam, batch 128
gathered by index from a pre-stacked 8192x512 tensor, one thread), but made to be sampled from
outside while it runs: after ``--warmup`` steps it prints ``ready <pid>`` on stdout, so a profiler
attaches to a process that is past imports and first-step allocations; every step's start and
duration (``time.perf_counter``, the system-wide monotonic clock on Linux, so comparable with the
attaching process's own readings) is kept in memory and written as JSON at the end.

    python benchmarks/workloads/attach_target.py --steps 3000 &
    trainmedic attach $! --duration 5 --json report.json

It runs ``--steps`` steps, or stops earlier at the first step after its stdin reaches end of file
when ``--until-eof`` is given (the benchmark closes the pipe once its last window is measured, so
no time is spent on steps nobody reads).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import torch
from torch import nn

# mlp_task.py lies beside this file, whether it runs as a script, under trainmedic run or by runpy.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_task import NUM_SAMPLES, task

torch.set_num_threads(1)  # one core for the loop; the other stays free for the sampler and the machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3000, help="steps to run at most (default 3000)")
parser.add_argument("--warmup", type=int, default=30, help="steps before 'ready' is printed (default 30)")
parser.add_argument("--out", help="write the step times here as JSON")
parser.add_argument("--until-eof", action="store_true", help="stop early once stdin reaches end of file")
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--hidden", type=int, default=768)
args = parser.parse_args()

X, Y, model, optimizer = task(args.hidden)

stop = threading.Event()
if args.until_eof:

    def _watch_stdin() -> None:
        # Blocked in read() it holds no GIL: the loop only tests a flag once per step.
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=_watch_stdin, name="stdin-eof", daemon=True).start()

starts: list[float] = []
durations: list[float] = []
loss: torch.Tensor | None = None
for step in range(args.steps):
    if step == args.warmup:
        print(f"ready {os.getpid()}", flush=True)
    if stop.is_set():
        break
    t0 = time.perf_counter()
    idx = torch.randint(0, NUM_SAMPLES, (args.batch,))
    x, y = X[idx], Y[idx]
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    durations.append(time.perf_counter() - t0)
    starts.append(t0)

record = {
    "pid": os.getpid(),
    "steps": len(durations),
    "warmup": args.warmup,
    "batch": args.batch,
    "hidden": args.hidden,
    "threads": torch.get_num_threads(),
    "stopped_early": stop.is_set(),
    "final_loss": float(loss.item()) if loss is not None else None,
    "step_start_s": starts,
    "step_time_s": durations,
}
if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(record, f)
median = sorted(durations)[len(durations) // 2] * 1e3 if durations else float("nan")
print(f"attach_target: {len(durations)} steps, median {median:.2f} ms/step", flush=True)
