"""A step-bound CPU training loop that times its own steps (the workload of ``benchmarks/overhead.py``).

A realistic, healthy loop: the data set is pre-stacked in memory, each batch is one gather by
index, then forward / backward / Adam step on a small MLP, single-threaded so that the timings
are stable on a small machine. Every iteration is timed with ``time.perf_counter`` and the list
is written as JSON, so the comparison excludes interpreter start-up, imports and the report:
only what a watcher adds to each step is measured.

    python benchmarks/workloads/step_bound.py --steps 400 --out times.json
    trainmedic run --quiet benchmarks/workloads/step_bound.py --steps 400 --out times.json

``--out`` may also be given as the ``STEP_BOUND_OUT`` environment variable.

``--toggle-watch K`` (``overhead.py``'s in-process blocks) imports trainmedic and alternates,
every K steps, between running under a ``WatchSession`` (the object ``trainmedic run`` drives:
step clock, torch hooks, 10 ms stack sampler) and running plain; each step's time is recorded
with whether it was watched. Same process, same memory layout, adjacent in time: only the
session differs. ``--toggle-first plain`` starts with a plain block.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from torch import nn

# mlp_task.py lies beside this file, whether it runs as a script, under trainmedic run or by runpy.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_task import NUM_SAMPLES, task

torch.set_num_threads(1)  # one core for the loop; the other stays free for the machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--out", default=os.environ.get("STEP_BOUND_OUT"))
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--hidden", type=int, default=768)
parser.add_argument(
    "--mark-step", type=int, default=50, help="snapshot CPU and sampler counters before this step"
)
parser.add_argument(
    "--toggle-watch", type=int, default=0, metavar="K", help="alternate watched / plain every K steps"
)
parser.add_argument("--toggle-first", choices=("watched", "plain"), default="watched")
parser.add_argument(
    "--toggle-interval-ms", type=float, default=10.0, help="the toggled session's sampling interval"
)
args = parser.parse_args()

X, Y, model, optimizer = task(args.hidden)


def _session():
    # Under `trainmedic run` the watch session is live in this process. The plain run never
    # imports trainmedic: it is only looked up in sys.modules.
    module = sys.modules.get("trainmedic.run.probe.session")
    return module.active_session() if module is not None else None


def _counters() -> dict:
    session = _session()
    snap = {
        "thread_cpu_s": time.thread_time(),
        "process_cpu_s": time.process_time(),
        "wall_s": time.perf_counter(),
    }
    if session is not None:
        snap["sampler_samples"] = session.sampler.samples
        snap["sampler_busy_s"] = session.sampler.busy_seconds
    return snap


if args.toggle_watch:
    from trainmedic.run.probe.session import WatchSession

toggled: WatchSession | None = None
watched: list[bool] = []
times: list[float] = []
mark: dict | None = None
loop_cpu = time.thread_time()
loop_wall = time.perf_counter()
for step in range(args.steps):
    if step == args.mark_step:
        mark = _counters()
    if args.toggle_watch and step % args.toggle_watch == 0:
        if toggled is not None:
            toggled.stop()
            toggled = None
        if (step // args.toggle_watch) % 2 == (0 if args.toggle_first == "watched" else 1):
            toggled = WatchSession(interval=args.toggle_interval_ms / 1000).start()
    watched.append(toggled is not None)
    t0 = time.perf_counter()
    idx = torch.randint(0, NUM_SAMPLES, (args.batch,))
    x, y = X[idx], Y[idx]
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    times.append(time.perf_counter() - t0)
if toggled is not None:
    toggled.stop()
loop_wall = time.perf_counter() - loop_wall
loop_cpu = time.thread_time() - loop_cpu  # the training thread's own CPU time over the loop
end = _counters()

record = {
    "steps": args.steps,
    "batch": args.batch,
    "hidden": args.hidden,
    "threads": torch.get_num_threads(),
    "final_loss": float(loss.item()),
    "loop_wall_s": loop_wall,
    "loop_thread_cpu_s": loop_cpu,
    "toggle_watch": args.toggle_watch or None,
    "watched": watched if args.toggle_watch else None,
    "toggle_interval_ms": args.toggle_interval_ms if args.toggle_watch else None,
    "step_times_s": times,
    # Counters from --mark-step to the end: the steady state, without imports and warm-up.
    "mark_step": args.mark_step if mark is not None else None,
    "steady": {k: end[k] - mark[k] for k in end} if mark is not None else None,
}
session = _session()
if session is not None:
    sampler = session.sampler
    record["sampler"] = {
        "interval_s": sampler.interval,
        "samples": sampler.samples,
        "busy_s": sampler.busy_seconds,
        "clock_index": session.clock.index,
        "step_source": session.clock.source,
    }
if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(record, f)
print(
    f"step_bound: {args.steps} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms/step, loss {loss.item():.4f}"
)
