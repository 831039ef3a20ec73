"""Where the stack sampler's time goes, per sample: a diagnostic for ``overhead.py``.

Runs ``workloads/step_bound.py`` in this process under a ``WatchSession`` whose sampler thread
runs an instrumented copy of ``StackSampler._run`` (the same steps, in the same order, with a
timer around each). It reports, per steady-state sample:

* wake-up lateness: how long after the requested interval the thread got the GIL back
  (OS scheduling plus waiting for the training thread to drop the GIL);
* the CPU (``time.thread_time``) and wall time of each phase: ``sys._current_frames()``,
  ``classify``, ``recorder.add``, and of what ``busy_seconds`` covers;
* what ``busy_seconds`` leaves out: the round trip around the (jittered) sleep;
* the stack depth walked, and the cost of ``sys._current_frames()`` against the thread count.

    python benchmarks/sampler_profile.py [--steps 600] [--interval-ms 10]

A diagnostic, not a benchmark with a goal: it writes nothing unless ``--json PATH`` is given.
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _env

WORKLOAD = _env.BENCHMARKS / "workloads" / "step_bound.py"


def instrumented_run(sampler: Any, log: list[tuple[float, ...]], skip_steps: int) -> None:
    """``StackSampler._run`` with timers; keep it step for step in line with the original."""
    import random

    from trainmedic._os import current_frames
    from trainmedic.run.probe.frames import PROBE
    from trainmedic.run.probe.sampler import _MODEL_KINDS

    clock, recorder, classify = sampler.clock, sampler.recorder, sampler.classifier.classify
    pc, tt = time.perf_counter, time.thread_time
    jitter = random.Random(0x7E57)
    low, high = sampler.interval * 0.5, sampler.interval * 1.5
    last = pc()
    while not sampler._stopping:
        asked = jitter.uniform(low, high)
        w0c, w0 = tt(), pc()
        time.sleep(asked)
        w1, w1c = pc(), tt()
        if sampler._stopping:
            break
        step, generation, anchored = clock.index, clock.restarts, clock.anchored
        cpu_start = tt()
        a = pc()
        frame = current_frames().get(sampler.thread_id)
        b, bc = pc(), tt()
        now = pc()
        weight, last = now - last, now
        if frame is None:
            break
        depth, f = 0, frame
        while f is not None:
            depth, f = depth + 1, f.f_back
        c0, c0c = pc(), tt()
        sample = classify(frame)
        c1, c1c = pc(), tt()
        del frame
        if sample.kind == PROBE:
            continue
        if sample.kind in _MODEL_KINDS and sample.category != "data":
            anchored = True
            if clock.index == step:
                clock.anchor()
        recorder.add(step, generation, anchored, sample, weight)
        d1, d1c = pc(), tt()
        sampler.samples += 1
        busy = tt() - cpu_start
        sampler.busy_seconds += busy
        if step >= skip_steps:  # steady state: past imports, warm-up and the op census
            log.append(
                (
                    w1 - w0 - asked,  # lateness of the wake-up (wall)
                    w1c - w0c,  # CPU of the sleep round trip
                    b - a,
                    bc - cpu_start,  # current_frames: wall, CPU
                    c1 - c0,
                    c1c - c0c,  # classify: wall, CPU
                    d1 - c1,
                    d1c - c1c,  # recorder.add (+ anchor): wall, CPU
                    busy,  # what busy_seconds counts
                    depth,
                )
            )


def current_frames_cost(threads: int, repeat: int = 2000) -> float:
    stop = threading.Event()
    extra = [threading.Thread(target=stop.wait, daemon=True) for _ in range(threads - 1)]
    for t in extra:
        t.start()
    try:
        started = time.perf_counter()
        for _ in range(repeat):
            sys._current_frames()
        return (time.perf_counter() - started) / repeat
    finally:
        stop.set()
        for t in extra:
            t.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--skip-steps", type=int, default=30, help="training steps to ignore at the start")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()

    from trainmedic.run.probe.session import WatchSession

    session = WatchSession(interval=args.interval_ms / 1000)
    sampler = session.sampler
    log: list[tuple[float, ...]] = []
    sampler._thread = threading.Thread(
        target=instrumented_run, args=(sampler, log, args.skip_steps), name="trainmedic-sampler", daemon=True
    )
    argv = sys.argv
    sys.argv = [str(WORKLOAD), "--steps", str(args.steps), "--mark-step", "0"]
    session.start()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        runpy.run_path(str(WORKLOAD), run_name="__main__")
    finally:
        measurements = session.stop()
        sys.argv = argv
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0

    columns = [
        "lateness",
        "wait_cpu",
        "frames_wall",
        "frames_cpu",
        "classify_wall",
        "classify_cpu",
        "record_wall",
        "record_cpu",
        "busy_cpu",
        "depth",
    ]
    table = {name: [row[i] for row in log] for i, name in enumerate(columns)}
    print(
        f"\nsampler profile: {len(log)} steady samples at {args.interval_ms:g} ms "
        f"({measurements.samples} in all, busy_seconds {measurements.sampler_busy_s * 1e3:.1f} ms over {wall:.1f} s)"
    )
    print(f"{'phase':<16} {'median':>9} {'p90':>9} {'max':>9}")
    summary: dict[str, Any] = {}
    for name in columns:
        values = sorted(table[name])
        if not values:
            continue
        med, p90, top = statistics.median(values), values[int(0.9 * (len(values) - 1))], values[-1]
        summary[name] = {"median": med, "p90": p90, "max": top}
        if name == "depth":
            print(f"{'stack depth':<16} {med:9.0f} {p90:9.0f} {top:9.0f}")
        else:
            print(f"{name:<16} {med * 1e6:7.1f}us {p90 * 1e6:7.1f}us {top * 1e6:7.1f}us")
    per_thread = {n: current_frames_cost(n) for n in (1, 4, 16, 64)}
    print(
        "sys._current_frames() alone: "
        + ", ".join(f"{n} threads {s * 1e6:.1f}us" for n, s in per_thread.items())
    )
    print(
        f"thread_time() call: {_call_cost(time.thread_time) * 1e6:.2f}us, perf_counter(): {_call_cost(time.perf_counter) * 1e6:.2f}us"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": _env.environment(),
                    "interval_ms": args.interval_ms,
                    "samples": len(log),
                    "phases_s": summary,
                    "current_frames_s_by_threads": per_thread,
                    "process_cpu_s": cpu,
                    "wall_s": wall,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0


def _call_cost(fn: Any, repeat: int = 100_000) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat


if __name__ == "__main__":
    sys.exit(main())
