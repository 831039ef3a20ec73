"""How much does ``trainmedic run`` slow a step-bound training loop? And is its memory bounded?

Baseline: the same workload script run with plain ``python``, in the same benchmark, interleaved
with the watched runs so that a noisy machine drifts both arms alike. The goal: at most 2 %
slower per step with default settings.

The workload, ``workloads/step_bound.py`` (an MLP trained with Adam on pre-stacked data, one
thread, ~10-30 ms a step), times every step itself with ``time.perf_counter``: interpreter
start-up, imports and the report are excluded, only what the watcher adds to each step counts.
The first ``--warmup`` steps of every run are dropped (trainmedic's own warm-up, op census and
first-step hook set-up happen there). Two interleavings:

1. Whole-process rounds. ``python step_bound.py`` and ``python -m trainmedic run --quiet
   step_bound.py`` run one after the other, ``--rounds`` times, the order rotated every round.
   Per arm: the median over rounds of each run's median step time; the spread is the min/max of
   the per-round paired ratios. Simple, but on a shared machine the step time drifts by several
   per cent within seconds, which is as large as the effect being measured.

   Measured on the shared 2-core VM this was written on, two *identical* processes differ by
   up to ~8 % for their whole life (memory layout, placement), and the speed drifts by ~10 %
   within a second, so a handful of rounds cannot resolve 2 %.

2. In-process blocks (the verdict). One process alternates every ``--block`` steps between
   running under a ``WatchSession`` (the object ``trainmedic run`` starts: step clock, torch
   hooks, 10 ms stack sampler; ``trainmedic run`` adds nothing per step beyond it) and running
   with no watcher at all. Watched and plain blocks share the process, its memory layout and
   the moment, so both noise sources cancel. The first ``--block-drop`` steps of every block
   are dropped in both arms (a new session's one-off hook set-up, heap scan and op census).
   Overhead: the median over watched blocks of (its median step / the mean of the two plain
   blocks around it), which also cancels a steady drift; with a bootstrap 95 % interval.

``--decompose`` adds diagnostic arms to both: ``hooks_only`` (the sampler never wakes) and
``sampler_1ms`` (10x the default rate, which lifts the sampler's per-sample cost above noise).

3. Memory. In a fresh child process, ``trainmedic.watch()`` runs over loops of cheap marker
   steps (``trainmedic.step()``) of 2,000 to 200,000 steps under ``tracemalloc``; what the
   watcher retains at the end of the loop must not grow with the number of steps (step records
   are decimated to a fixed capacity).

    python benchmarks/overhead.py                  # ~4 minutes; writes benchmarks/results/overhead-<date>.json
    python benchmarks/overhead.py --decompose      # + hooks-only and 1 ms arms (~9 minutes)
    python benchmarks/overhead.py --rounds 2 --steps 200 --block-steps 400 --no-write   # smoke run
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _env

WORKLOAD = _env.BENCHMARKS / "workloads" / "step_bound.py"
WORKLOAD_MODEL = "MLP 512-768-768-768-10, batch 128, Adam, torch.set_num_threads(1)"
GOAL_PCT = 2.0
MEMORY_STEPS = (2_000, 20_000, 200_000)  # at the default 10 ms interval
# The per-step sample slots grow with samples (wall time), not steps: fill them directly.
RECORDER_SAMPLES = (5_000, 100_000)
MEMORY_GROWTH_LIMIT = 2.0  # the largest run may retain at most 2x the smallest, over 100x the steps

_TRAINMEDIC = [sys.executable, "-m", "trainmedic", "run", "--quiet"]
# name -> the command prefix that runs the workload (the baseline first).
ARMS: dict[str, list[str]] = {
    "baseline": [sys.executable],
    "trainmedic": _TRAINMEDIC,
}
DIAGNOSTIC_ARMS: dict[str, list[str]] = {
    # The sampler's first wake-up is ~3 hours away: hooks, step clock and op census only.
    "hooks_only": [*_TRAINMEDIC, "--interval-ms", "1e7"],
    "sampler_1ms": [*_TRAINMEDIC, "--interval-ms", "1"],
}
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def workload_command(
    prefix: list[str], steps: int, mark_step: int, out: Path, extra: list[str] = ()
) -> list[str]:
    workload = os.path.relpath(WORKLOAD, _env.REPO)
    return [
        *prefix,
        workload,
        "--steps",
        str(steps),
        "--mark-step",
        str(mark_step),
        "--out",
        str(out),
        *extra,
    ]


# -- 1. whole-process rounds ----------------------------------------------------------------


def run_once(arm: str, prefix: list[str], args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    out = tmp / f"{tag}.json"
    command = workload_command(prefix, args.steps, args.warmup, out)
    busy_before, children_before = _env.system_busy_s(), _children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(
        command,
        check=False,
        cwd=_env.REPO,
        env={**os.environ, **CHILD_ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    process_wall = time.perf_counter() - started
    own_cpu = _children_cpu_s() - children_before
    busy = _env.system_busy_s() - busy_before if busy_before is not None else None
    if done.returncode != 0 or not out.exists():
        raise SystemExit(
            f"overhead: {arm} run failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}"
        )
    record = json.loads(out.read_text(encoding="utf-8"))
    times = record["step_times_s"][args.warmup :]
    steady = record.get("steady") or {}
    result: dict[str, Any] = {
        "arm": arm,
        "median_ms": statistics.median(times) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "p10_ms": _quantile(times, 0.10) * 1e3,
        "p90_ms": _quantile(times, 0.90) * 1e3,
        "steps_timed": len(times),
        "steady_wall_s": steady.get("wall_s"),
        "thread_cpu_ms_per_step": steady["thread_cpu_s"] / len(times) * 1e3 if steady else None,
        "process_cpu_ms_per_step": steady["process_cpu_s"] / len(times) * 1e3 if steady else None,
        "process_wall_s": process_wall,
        "process_cpu_s": own_cpu,
        # Cores kept busy by everything else on the machine during this run (a noisy neighbour).
        "background_cores": max(busy - own_cpu, 0.0) / process_wall if busy is not None else None,
    }
    sampler = record.get("sampler")
    if sampler is not None:
        samples = steady.get("sampler_samples", 0)
        busy_s = steady.get("sampler_busy_s", 0.0)
        result["sampler"] = {
            "interval_s": sampler["interval_s"],
            "samples_total": sampler["samples"],
            "busy_total_s": sampler["busy_s"],
            "samples_steady": samples,
            "busy_steady_s": busy_s,
            "busy_us_per_sample_steady": busy_s / samples * 1e6 if samples else None,
            "busy_pct_of_steady_wall": busy_s / steady["wall_s"] * 100 if steady.get("wall_s") else None,
            "samples_per_step": samples / len(times),
            "step_source": sampler["step_source"],
        }
    return result


def measure_rounds(arms: dict[str, list[str]], args: argparse.Namespace) -> dict[str, Any]:
    names = list(arms)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="trainmedic-overhead-") as tmp:
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotate: each arm leads in turn
            for position, name in enumerate(order):
                result = run_once(name, arms[name], args, Path(tmp), f"r{r}-{name}")
                result.update(round=r, position=position)
                runs.append(result)
                _progress(
                    f"rounds {r + 1}/{args.rounds} {name:<12} {result['median_ms']:7.3f} ms/step  "
                    f"(process {result['process_wall_s']:.1f} s, background {result['background_cores'] or 0:.2f} cores)"
                )

    by_arm = {name: [run for run in runs if run["arm"] == name] for name in names}
    base = by_arm["baseline"]
    base_median = statistics.median(run["median_ms"] for run in base)
    base_cpu = _median_of(base, "thread_cpu_ms_per_step")
    base_wall = statistics.median(run["process_wall_s"] for run in base)
    summary: dict[str, Any] = {}
    for name, arm_runs in by_arm.items():
        medians = [run["median_ms"] for run in arm_runs]
        entry: dict[str, Any] = {
            "command": _show(arms[name]),
            "round_medians_ms": medians,
            "median_ms": statistics.median(medians),
            "min_ms": min(medians),
            "max_ms": max(medians),
            "thread_cpu_ms_per_step": _median_of(arm_runs, "thread_cpu_ms_per_step"),
            "process_wall_s": statistics.median(run["process_wall_s"] for run in arm_runs),
            "background_cores": _median_of(arm_runs, "background_cores"),
        }
        if name != "baseline":
            paired = [100 * (run["median_ms"] / b["median_ms"] - 1) for run, b in zip(arm_runs, base)]
            entry.update(
                overhead_pct=100 * (entry["median_ms"] / base_median - 1),
                paired_overhead_pct=paired,
                paired_min_pct=min(paired),
                paired_max_pct=max(paired),
                paired_median_pct=statistics.median(paired),
                thread_cpu_overhead_pct=100 * (entry["thread_cpu_ms_per_step"] / base_cpu - 1)
                if base_cpu
                else None,
                process_wall_extra_s=entry["process_wall_s"] - base_wall,
            )
            samplers = [run["sampler"] for run in arm_runs if run.get("sampler")]
            if samplers:
                entry["sampler_busy_us_per_sample"] = _median_of(samplers, "busy_us_per_sample_steady")
                entry["sampler_busy_pct_of_wall"] = _median_of(samplers, "busy_pct_of_steady_wall")
                entry["sampler_samples_per_step"] = _median_of(samplers, "samples_per_step")
        summary[name] = entry
    return {
        "method": "whole-process rounds: median over rounds of each run's median step time; spread = min/max of per-round paired ratios",
        "rounds": args.rounds,
        "steps_per_run": args.steps,
        "runs": runs,
        "arms": summary,
        "baseline_noise_pct": 100 * (summary["baseline"]["max_ms"] / summary["baseline"]["min_ms"] - 1),
        "background_cores_median": _median_of(runs, "background_cores"),
    }


# -- 2. in-process blocks -------------------------------------------------------------------


def measure_blocks(args: argparse.Namespace, configs: dict[str, float]) -> dict[str, Any]:
    """The workload alternates watched / plain blocks in one process; per config, ``--block-runs`` processes."""
    k, drop = args.block, args.block_drop
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="trainmedic-blocks-") as tmp:
        for name, interval_ms in configs.items():
            ratios: list[float] = []
            pooled: dict[bool, list[float]] = {True: [], False: []}
            per_run: list[dict[str, Any]] = []
            for run in range(args.block_runs):
                first = "watched" if run % 2 == 0 else "plain"
                out = Path(tmp) / f"{name}-{run}.json"
                extra = [
                    "--toggle-watch",
                    str(k),
                    "--toggle-first",
                    first,
                    "--toggle-interval-ms",
                    repr(interval_ms),
                ]
                command = workload_command([sys.executable], args.block_steps, args.warmup, out, extra)
                started = time.perf_counter()
                done = subprocess.run(
                    command,
                    check=False,
                    cwd=_env.REPO,
                    env={**os.environ, **CHILD_ENV},
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                if done.returncode != 0 or not out.exists():
                    raise SystemExit(
                        f"overhead: in-process blocks failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}"
                    )
                record = json.loads(out.read_text(encoding="utf-8"))
                times, watched = record["step_times_s"], record["watched"]
                # Block medians after the warm-up; a new session's first steps dropped in both arms.
                blocks = [
                    (watched[b * k], statistics.median(times[b * k + drop : (b + 1) * k]))
                    for b in range(len(times) // k)
                    if b * k >= args.warmup
                ]
                for b in range(len(times) // k):
                    if b * k >= args.warmup:
                        pooled[watched[b * k]].extend(times[b * k + drop : (b + 1) * k])
                # Each watched block against the mean of the plain blocks on either side (A-B-A): a
                # steady drift of the machine's speed cancels, whichever arm the run starts with.
                run_ratios = [
                    100 * (blocks[i][1] / (0.5 * (blocks[i - 1][1] + blocks[i + 1][1])) - 1)
                    for i in range(1, len(blocks) - 1)
                    if blocks[i][0] and not blocks[i - 1][0] and not blocks[i + 1][0]
                ]
                ratios.extend(run_ratios)
                per_run.append(
                    {
                        "first": first,
                        "cycles": len(run_ratios),
                        "median_pct": statistics.median(run_ratios),
                        "wall_s": time.perf_counter() - started,
                        "block_medians_ms": [[int(w), round(m * 1e3, 4)] for w, m in blocks],
                    }
                )
                _progress(
                    f"in-process blocks {name} run {run + 1}/{args.block_runs}: {statistics.median(run_ratios):+.2f}% "
                    f"over {len(run_ratios)} cycles ({time.perf_counter() - started:.0f} s)"
                )
            low, high = _bootstrap_median_ci(ratios)
            summary[name] = {
                "interval_ms": interval_ms,
                "plain_ms": statistics.median(pooled[False]) * 1e3,
                "watched_ms": statistics.median(pooled[True]) * 1e3,
                "cycles": len(ratios),
                "overhead_pct": statistics.median(ratios),
                "ci95_pct": [low, high],
                "iqr_pct": [_quantile(ratios, 0.25), _quantile(ratios, 0.75)],
                "pooled_overhead_pct": 100
                * (statistics.median(pooled[True]) / statistics.median(pooled[False]) - 1),
                "runs": per_run,
            }
    return {
        "method": (
            "in-process blocks: one process alternates every block between a WatchSession (what trainmedic run "
            "drives) and no watcher; overhead = median over watched blocks of (block median / mean of the two "
            "neighbouring plain block medians - 1), bootstrap 95% CI"
        ),
        "runs_per_config": args.block_runs,
        "steps_per_run": args.block_steps,
        "block_steps": k,
        "dropped_steps_per_block": drop,
        "configs": summary,
    }


# -- 3. memory ------------------------------------------------------------------------------


def memory_child(specs: list[tuple[int, float]]) -> dict[str, Any]:
    """Runs in a fresh interpreter (no torch): the watcher's retained memory vs the number of steps."""
    import tracemalloc

    import trainmedic

    def work() -> int:  # a few microseconds of plain Python: a cheap step
        total = 0
        for i in range(40):
            total += i * i
        return total

    def one(n: int, interval_ms: float) -> dict[str, Any]:
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with trainmedic.watch(interval=interval_ms / 1000) as w:
            started = time.perf_counter()
            for _ in range(n):
                work()
                trainmedic.step()
            loop_s = time.perf_counter() - started
            gc.collect()
            current, peak = tracemalloc.get_traced_memory()
            session = w._session  # the decimated records, for the counts below
            records = {
                "step_durations": len(session.clock.durations),
                "step_durations_stride": session.clock.durations.stride,
                "per_step_samples": len(session.recorder.per_step),
                "per_step_samples_stride": session.recorder.per_step.stride,
                "capacity": session.clock.durations.capacity,
                "samples": session.sampler.samples,
            }
            del session
        with_report = tracemalloc.get_traced_memory()[0] - base
        report = w.report
        steps_recorded = report.steps.count if report is not None else None
        del w, report
        gc.collect()
        released = tracemalloc.get_traced_memory()[0] - base
        return {
            "steps": n,
            "interval_ms": interval_ms,
            "loop_s": loop_s,
            "retained_at_end_bytes": current - base,  # the live watcher, just before it stops
            "peak_during_bytes": peak - base,
            "retained_with_report_bytes": with_report,  # stopped; the Report object still alive
            "after_release_bytes": released,  # everything dropped: should be ~0
            "report_steps_count": steps_recorded,
            "records": records,
        }

    def recorder(n: int) -> dict[str, Any]:
        """A Recorder fed one sample per step for ``n`` steps, as a sampler would over a long run."""
        from trainmedic.run.probe.frames import Classified
        from trainmedic.run.probe.recorder import Recorder

        kinds = [
            Classified("compute", "forward", "train.py:41", work.__code__),
            Classified(None, "", "train.py:44", work.__code__),
            Classified("data", "loader", "train.py:38", work.__code__),
        ]
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        rec = Recorder(warmup=3)
        for step in range(n):
            rec.add(step, 0, step % 2 == 0, kinds[step % 3], 0.01)
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
        out = {
            "sampled_steps": n,
            "retained_bytes": current - base,
            "peak_bytes": peak - base,
            "per_step_samples": len(rec.per_step),
            "stride": rec.per_step.stride,
            "capacity": rec.per_step.capacity,
        }
        del rec
        return out

    tracemalloc.start()
    one(500, 10.0)  # warm-up: lazy imports and one-off caches are not the watcher's per-step memory
    recorder(100)
    return {
        "tracemalloc": True,
        "step": "~2 us of Python + trainmedic.step()",
        "runs": [one(n, interval) for n, interval in specs],
        "recorder": [recorder(n) for n in RECORDER_SAMPLES],
    }


def measure_memory() -> dict[str, Any]:
    specs = [(n, 10.0) for n in MEMORY_STEPS]
    arg = ",".join(f"{n}@{interval:g}" for n, interval in specs)
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-child", arg]
    done = subprocess.run(command, check=False, cwd=_env.REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"overhead: memory child failed (exit {done.returncode})\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    default = [r for r in result["runs"] if r["interval_ms"] == 10.0]
    small, large = default[0], default[-1]
    capped = all(
        r["records"]["step_durations"] <= r["records"]["capacity"]
        and r["records"]["per_step_samples"] <= r["records"]["capacity"]
        for r in result["runs"]
    )
    rec_small, rec_large = result["recorder"][0], result["recorder"][-1]
    recorder_flat = (
        rec_large["retained_bytes"] <= MEMORY_GROWTH_LIMIT * rec_small["retained_bytes"]
        and rec_large["per_step_samples"] <= rec_large["capacity"]
    )
    result.update(
        growth_bytes=large["retained_at_end_bytes"] - small["retained_at_end_bytes"],
        growth_bytes_per_1000_steps=1000
        * (large["retained_at_end_bytes"] - small["retained_at_end_bytes"])
        / (large["steps"] - small["steps"]),
        ratio_retained=large["retained_at_end_bytes"] / small["retained_at_end_bytes"],
        ratio_peak=large["peak_during_bytes"] / small["peak_during_bytes"],
        records_capped=capped,
        recorder_ratio_retained=rec_large["retained_bytes"] / rec_small["retained_bytes"],
        recorder_flat=recorder_flat,
        criterion=(
            f"at the default 10 ms, retained and peak at {large['steps']:,} steps <= {MEMORY_GROWTH_LIMIT:g} x those at "
            f"{small['steps']:,} steps ({large['steps'] // small['steps']}x the steps); every record list <= its capacity; "
            f"a Recorder fed {rec_large['sampled_steps']:,} sampled steps retains <= {MEMORY_GROWTH_LIMIT:g} x one fed "
            f"{rec_small['sampled_steps']:,}"
        ),
        bounded=large["retained_at_end_bytes"] <= MEMORY_GROWTH_LIMIT * small["retained_at_end_bytes"]
        and large["peak_during_bytes"] <= MEMORY_GROWTH_LIMIT * small["peak_during_bytes"]
        and capped
        and recorder_flat,
    )
    return result


# -- output ---------------------------------------------------------------------------------


def print_report(result: dict[str, Any], args: argparse.Namespace) -> None:
    over = result["overhead"]
    print(
        f"\ntrainmedic run overhead: {WORKLOAD.name} ({WORKLOAD_MODEL}); first {args.warmup} steps of every run dropped"
    )
    blocks = over.get("blocks")
    if blocks:
        print(
            f"\nin-process blocks: {blocks['runs_per_config']} runs x {blocks['steps_per_run']} steps, "
            f"{blocks['block_steps']}-step blocks alternating watched / plain, first {blocks['dropped_steps_per_block']} of each dropped"
        )
        header = f"{'session':<12} {'plain ms':>9} {'watched ms':>10} {'cycles':>6} {'overhead':>9} {'95% CI':>15} {'cycle IQR':>17} {'pooled':>8}"
        print(header)
        print("-" * len(header))
        for name, c in blocks["configs"].items():
            print(
                f"{name:<12} {c['plain_ms']:9.3f} {c['watched_ms']:10.3f} {c['cycles']:6d} {c['overhead_pct']:+8.2f}% "
                f"{_range(c['ci95_pct']):>15} {_range(c['iqr_pct']):>17} {c['pooled_overhead_pct']:+7.2f}%"
            )
    rounds = over.get("rounds")
    if rounds:
        print(
            f"\nwhole-process rounds: {rounds['rounds']} rounds x {rounds['steps_per_run']} steps, order rotated"
        )
        header = (
            f"{'arm':<12} {'ms/step':>8} {'rounds min..max':>17} {'overhead':>9} {'paired min..max':>17} "
            f"{'thread CPU':>10} {'sampler':>13} {'process':>8}"
        )
        print(header)
        print("-" * len(header))
        for name, arm in rounds["arms"].items():
            spread = f"{arm['min_ms']:.3f}..{arm['max_ms']:.3f}"
            if name == "baseline":
                pct, paired, sampler = "-", "-", "-"
            else:
                pct = f"{arm['overhead_pct']:+.2f}%"
                paired = _range([arm["paired_min_pct"], arm["paired_max_pct"]])
                us = arm.get("sampler_busy_us_per_sample")
                sampler = f"{us:.0f} us/sample" if us else "-"
            print(
                f"{name:<12} {arm['median_ms']:8.3f} {spread:>17} {pct:>9} {paired:>17} "
                f"{arm['thread_cpu_ms_per_step']:8.3f}ms {sampler:>13} {arm['process_wall_s']:7.2f}s"
            )
        print(
            f"noise: baseline rounds differ by up to {rounds['baseline_noise_pct']:.1f}%; other processes kept "
            f"{rounds['background_cores_median'] or 0:.2f} cores busy (median)"
        )
        head = rounds["arms"]["trainmedic"]
        if head.get("sampler_busy_us_per_sample"):
            print(
                f"sampler (its own busy_seconds): {head['sampler_busy_us_per_sample']:.0f} us CPU per sample, "
                f"{head['sampler_busy_pct_of_wall']:.2f}% of a core, {head['sampler_samples_per_step']:.2f} samples/step; "
                f"training-thread CPU {head['thread_cpu_overhead_pct']:+.2f}%"
            )
        print(
            f"whole process: baseline {rounds['arms']['baseline']['process_wall_s']:.2f} s, trainmedic "
            f"{head['process_wall_s']:.2f} s ({head['process_wall_extra_s']:+.2f} s: import, hooks, diagnosis; not per-step)"
        )

    verdict = "PASS" if over["pass"] else "FAIL"
    print(f"\noverhead ({over['method']}): {over['overhead_pct']:+.2f}%", end="")
    if over.get("ci95_pct"):
        print(f" (95% CI {_range(over['ci95_pct'])})", end="")
    print(f", goal <= {GOAL_PCT:g}%: {verdict}")
    memory = result.get("memory")
    if memory:
        print("\nwatcher memory (tracemalloc, cheap marker steps):")
        print(
            f"{'steps':>9} {'interval':>8} {'retained':>11} {'peak':>11} {'with report':>12} {'after release':>14} "
            f"{'loop':>7} {'samples':>7} {'records (stride)':>22}"
        )
        for run in memory["runs"]:
            rec = run["records"]
            records = (
                f"{rec['step_durations']}({rec['step_durations_stride']}) / "
                f"{rec['per_step_samples']}({rec['per_step_samples_stride']})"
            )
            print(
                f"{run['steps']:>9,} {run['interval_ms']:6g}ms {_kib(run['retained_at_end_bytes']):>11} {_kib(run['peak_during_bytes']):>11} "
                f"{_kib(run['retained_with_report_bytes']):>12} {_kib(run['after_release_bytes']):>14} {run['loop_s']:6.2f}s "
                f"{rec['samples']:>7} {records:>22}"
            )
        print(
            f"records: step durations / per-step sample slots kept (their decimation stride), capacity "
            f"{memory['runs'][0]['records']['capacity']} each; sample slots grow with samples (wall time), not steps"
        )
        for rec in memory["recorder"]:
            print(
                f"Recorder fed {rec['sampled_steps']:>7,} sampled steps: retained {_kib(rec['retained_bytes'])}, "
                f"peak {_kib(rec['peak_bytes'])}, {rec['per_step_samples']} slots kept (stride {rec['stride']})"
            )
        print(
            f"growth {memory['growth_bytes_per_1000_steps']:+.0f} B per 1,000 steps (retained x{memory['ratio_retained']:.2f}, "
            f"peak x{memory['ratio_peak']:.2f}; Recorder x{memory['recorder_ratio_retained']:.2f})"
        )
        print(f"{memory['criterion']}: {'PASS' if memory['bounded'] else 'FAIL'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode",
        choices=("both", "blocks", "rounds"),
        default="both",
        help="which interleavings to run (default both; the verdict comes from the in-process blocks when run)",
    )
    parser.add_argument("--rounds", type=int, default=8, help="whole-process rounds per arm (default 8)")
    parser.add_argument(
        "--steps", type=int, default=400, help="training steps per whole-process run (default 400)"
    )
    parser.add_argument(
        "--block-runs", type=int, default=2, help="in-process block runs (processes) per config (default 2)"
    )
    parser.add_argument(
        "--block-steps", type=int, default=2400, help="training steps per in-process run (default 2400)"
    )
    parser.add_argument("--block", type=int, default=20, help="steps per in-process block (default 20)")
    parser.add_argument(
        "--block-drop",
        type=int,
        default=4,
        help="steps dropped at the start of every block: a new session's hook set-up and op census (default 4)",
    )
    parser.add_argument(
        "--warmup", type=int, default=50, help="steps dropped at the start of every run (default 50)"
    )
    parser.add_argument("--decompose", action="store_true", help="add hooks-only and 1 ms sampler arms")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--no-write", action="store_true", help="print only; write no result file")
    parser.add_argument(
        "--out", type=Path, help="result file (default benchmarks/results/overhead-<date>.json)"
    )
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.memory_child:
        specs = [(int(n), float(i)) for n, i in (spec.split("@") for spec in args.memory_child.split(","))]
        print(json.dumps(memory_child(specs)))
        return 0
    if args.warmup >= min(args.steps, args.block_steps) or args.block <= args.block_drop + 2:
        parser.error(
            "--warmup must be smaller than --steps and --block-steps, and --block larger than --block-drop + 2"
        )

    arms = dict(ARMS)
    if args.decompose:
        arms.update(DIAGNOSTIC_ARMS)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "overhead",
        **_env.environment(),
        "settings": {
            "workload": os.path.relpath(WORKLOAD, _env.REPO),
            "workload_model": WORKLOAD_MODEL,
            "arms": {name: _show(prefix) for name, prefix in arms.items()},
            "trainmedic_settings": "defaults: --interval-ms 10, --warmup 3",
            "warmup_steps_dropped": args.warmup,
            "mode": args.mode,
            "rounds": args.rounds,
            "steps_per_run": args.steps,
            "block_runs": args.block_runs,
            "block_run_steps": args.block_steps,
            "block_steps": args.block,
            "block_dropped_steps": args.block_drop,
        },
    }
    overhead: dict[str, Any] = {}
    if args.mode in ("both", "blocks"):
        configs = {"default": 10.0}
        if args.decompose:
            configs.update(hooks_only=1e7, sampler_1ms=1.0)
        overhead["blocks"] = measure_blocks(args, configs)
    if args.mode in ("both", "rounds"):
        overhead["rounds"] = measure_rounds(arms, args)
    if "blocks" in overhead:
        head = overhead["blocks"]["configs"]["default"]
        overhead.update(
            method="in-process blocks", overhead_pct=head["overhead_pct"], ci95_pct=head["ci95_pct"]
        )
    else:
        head = overhead["rounds"]["arms"]["trainmedic"]
        overhead.update(
            method="whole-process rounds",
            overhead_pct=head["overhead_pct"],
            spread_pct=[head["paired_min_pct"], head["paired_max_pct"]],
        )
    if "rounds" in overhead:
        r = overhead["rounds"]["arms"]["trainmedic"]
        overhead.update(
            rounds_overhead_pct=r["overhead_pct"],
            rounds_spread_pct=[r["paired_min_pct"], r["paired_max_pct"]],
        )
    overhead.update(goal_pct=GOAL_PCT, **{"pass": overhead["overhead_pct"] <= GOAL_PCT})
    if "ci95_pct" in overhead:
        overhead["pass_with_confidence"] = overhead["ci95_pct"][1] <= GOAL_PCT
    result["overhead"] = overhead
    if not args.no_memory:
        _progress("memory: watching marker-step loops under tracemalloc ...")
        result["memory"] = measure_memory()
    result["load_average_after"] = _env.load_average()
    result["benchmark_seconds"] = time.perf_counter() - started
    print_report(result, args)
    if not args.no_write:
        path = args.out or _env.results_path("overhead")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\nwritten: {os.path.relpath(path, _env.REPO)}")
    return 0 if overhead["pass"] and result.get("memory", {}).get("bounded", True) else 1


# -- helpers --------------------------------------------------------------------------------


def _bootstrap_median_ci(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _median_of(items: list[dict[str, Any]], key: str) -> float | None:
    values = [item[key] for item in items if item.get(key) is not None]
    return statistics.median(values) if values else None


def _show(prefix: list[str]) -> str:
    return " ".join(["python", *prefix[1:]]) + " " + os.path.relpath(WORKLOAD, _env.REPO)


def _range(pair: list[float]) -> str:
    return f"{pair[0]:+.2f}..{pair[1]:+.2f}%"


def _kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def _progress(message: str) -> None:
    print(f"[overhead] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
