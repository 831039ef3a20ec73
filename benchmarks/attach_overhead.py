"""What does sampling a running training job from outside cost that job? (``trainmedic attach``)

``trainmedic attach PID`` samples a Python process it did not start, with py-spy::

    py-spy record --pid PID --duration D --rate 100 --nonblocking --idle --subprocesses \\
        --full-filenames --format speedscope --output FILE

A user points it at a job that is already running, often a long and expensive one, so the job's
step time while it is being sampled matters. Goal: at the default 100 Hz, at most 2 % slower per
step. Baseline: the same job, in the same process, while nothing samples it.

The job is ``workloads/attach_target.py`` (an MLP trained with Adam on pre-stacked data,
``torch.set_num_threads(1)``, ~25-40 ms a step on the 2-vCPU dev VM). It times every step with
``time.perf_counter`` (CLOCK_MONOTONIC, the same clock in every process) and prints ``ready``
after its warm-up steps; then this benchmark measures a series of windows of ``--duration``
seconds in that one process, ``--cycles`` passes over the sampled arms S:

    alone S1 alone S2 alone S3 alone S3 alone S2 alone S1 alone   (order rotated every round)

- ``py-spy``: the command above, run from the venv's ``bin`` next to this interpreter. The window
  is the sampler process's whole life (attach and symbol loading included): the steps that
  started after it was launched and ended before it exited.
- ``attach``: ``python -m trainmedic attach PID --duration D --json FILE``, when the command
  exists and passes a probe against a sleeping process; otherwise the arm is skipped with a note.
  Scored twice: over the whole command (interpreter start-up and the diagnosis run beside the
  job: on a 2-core machine they compete with it), and over the steps while its py-spy child ran
  (polled every 50 ms), which is the sampling itself, comparable with the ``py-spy`` arm.
- ``null``: nothing samples the job, but it sits in a sampled arm's slot and is scored the same
  way: the overhead this estimator reports when there is none (the noise floor).

Why one process and A-B-A: ``overhead.py`` measured on the same kind of VM that two identical
processes differ by up to ~8 % for their whole life (memory layout, placement) and that the
speed drifts by ~10 % within a second, so comparing separate processes cannot resolve 2 %. Here
every sampled window is compared with the mean of the two alone windows around it (step-time
medians), which cancels the process's own level and a steady drift. Each round is a fresh process;
per arm, the overhead is the median over rounds of the round's median ratio, the spread is the
min..max over rounds, and a bootstrap over all windows gives a 95 % interval. A second lens does
the same with each window's 10th-percentile step (the fast steps, which the machine's slow
stretches move less). A difference whose per-round range includes 0, or that is no larger than
what the ``null`` arm shows, is reported as within noise. The outcome: pass or fail by the point
estimates of ``py-spy`` and of ``attach`` while sampling (exit status 0 or 1), or, when the null
arm itself moved by more than 2 % in a round, "unresolved" (exit status 3): that run could not
tell 2 % from 0.

    python benchmarks/attach_overhead.py            # ~3.5 min; writes results/attach_overhead-<date>.json
    python benchmarks/attach_overhead.py --quick    # smoke run (~40 s); writes nothing unless --out
    python benchmarks/attach_overhead.py --rounds 8 --cycles 3   # tighter, ~7 min
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _env

WORKLOAD = _env.BENCHMARKS / "workloads" / "attach_target.py"
WORKLOAD_MODEL = "MLP 512-768-768-768-10, batch 128, Adam, torch.set_num_threads(1)"
GOAL_PCT = 2.0
BUSY_CORES = 0.25  # other processes' load above which the run is flagged as taken on a busy machine
PY_SPY = Path(sys.executable).parent / "py-spy"
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ARM_LABELS = {
    "alone": "alone",
    "null": "alone (null)",
    "py-spy": "py-spy record",
    "attach": "trainmedic attach",
    "attach-sampling": "  while sampling",
}


def pyspy_command(pid: int, duration: int, rate: int, output: Path) -> list[str]:
    """The sampling command of ``trainmedic attach``, verbatim."""
    return [
        str(PY_SPY),
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(duration),
        "--rate",
        str(rate),
        "--nonblocking",
        "--idle",
        "--subprocesses",
        "--full-filenames",
        "--format",
        "speedscope",
        "--output",
        str(output),
    ]


def attach_command(pid: int, duration: int, rate: int, output: Path) -> list[str]:
    command = [sys.executable, "-m", "trainmedic", "attach", str(pid), "--duration", str(duration)]
    if rate != 100:  # only passed when asked for: the default rate is the command's own
        command += ["--rate", str(rate)]
    return [*command, "--json", str(output)]


# -- the arms -------------------------------------------------------------------------------


def probe_attach(rate: int, tmp: Path) -> tuple[bool, str, dict[str, Any]]:
    """Whether ``trainmedic attach`` exists and exits 0 on a sleeping process (then it gets an arm)."""
    try:
        found = importlib.util.find_spec("trainmedic.cli.attach") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return False, "trainmedic.cli.attach is not importable: the attach arm is skipped", {}
    # A target without torch: the probe only asks whether the command works, cheaply.
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    out = tmp / "probe.json"
    command = attach_command(target.pid, 1, rate, out)
    try:
        time.sleep(0.3)  # past the interpreter's start-up, so there is a Python runtime to read
        done = subprocess.run(
            command, cwd=_env.REPO, capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        return (
            False,
            "trainmedic attach did not finish within 120 s on a probe: the attach arm is skipped",
            {},
        )
    finally:
        target.kill()
        target.wait()
    detail = {
        "command": _show(command, target.pid),
        "returncode": done.returncode,
        "stderr_tail": done.stderr[-1500:],
        "json_written": out.exists() and out.stat().st_size > 0,
    }
    if done.returncode != 0 or not detail["json_written"]:
        return (
            False,
            f"trainmedic attach failed its probe (exit {done.returncode}, json written: "
            f"{detail['json_written']}): the attach arm is skipped",
            detail,
        )
    return True, "trainmedic attach passed its probe: measured", detail


def run_sampler(arm: str, pid: int, args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    """Run one sampling command against the job to its end; its wall time and CPU (with its children).

    For ``attach`` the life of its py-spy child is also noted (polled every 50 ms), so the steps
    taken while it samples can be told from those during the command's start-up and diagnosis.
    """
    output = tmp / f"{tag}.{'speedscope' if arm == 'py-spy' else 'attach'}.json"
    if arm == "py-spy":
        command = pyspy_command(pid, args.duration, args.rate, output)
    else:
        command = attach_command(pid, args.duration, args.rate, output)
    log = tmp / f"{tag}.log"
    cpu_before = _children_cpu_s()
    spy_seen = spy_gone = None
    deadline = time.perf_counter() + args.duration + 120
    with open(log, "wb") as sink:  # a file, not a pipe: nothing can block on a full buffer
        proc = subprocess.Popen(command, cwd=_env.REPO, stdout=sink, stderr=subprocess.STDOUT)
        while True:
            try:
                returncode = proc.wait(timeout=0.05 if arm == "attach" else args.duration + 120)
                break
            except subprocess.TimeoutExpired:
                if time.perf_counter() > deadline:
                    proc.kill()
                    returncode = proc.wait()
                    break
            now = time.perf_counter()
            sampling = _has_child_named(proc.pid, "py-spy")
            if sampling and spy_seen is None:
                spy_seen = now
            elif not sampling and spy_seen is not None and spy_gone is None:
                spy_gone = now
    end = time.perf_counter()
    return {
        "command": _show(command, pid),
        "returncode": returncode,
        # Only this command was waited for in between: its CPU, and that of its own children.
        "cpu_s": _children_cpu_s() - cpu_before,
        # attach only: when its py-spy child was first and last seen running (50 ms polls).
        "pyspy_seen": spy_seen,
        "pyspy_gone": (spy_gone or end) if spy_seen is not None else None,
        "output": str(output),
        "log": str(log),
    }


def sampler_details(window: dict[str, Any]) -> None:
    """After the round (not inside a window): what the sampler reported and wrote."""
    sampler = window["sampler"]
    log = Path(sampler.pop("log"))
    output = Path(sampler.pop("output"))
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    match = re.search(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)", text)
    if match:
        sampler["samples"], sampler["errors"] = int(match.group(1)), int(match.group(2))
    sampler["output_bytes"] = output.stat().st_size if output.exists() else 0
    if window["arm"] == "py-spy" and output.exists():
        try:
            profiles = json.loads(output.read_text(encoding="utf-8")).get("profiles", [])
            # One profile per thread (--idle samples the idle ones too); the training thread has most.
            sampler["threads_profiled"] = len(profiles)
            sampler["main_thread_samples"] = max((len(p.get("samples", [])) for p in profiles), default=0)
        except (OSError, ValueError):
            pass
    if window["arm"] == "attach" and output.exists():
        # What attach concluded: a check that it read the job, not a subject of this benchmark.
        try:
            report = json.loads(output.read_text(encoding="utf-8"))
            sampler["report"] = {k: report.get(k) for k in ("outcome", "bottleneck", "breakdown")}
        except (OSError, ValueError, AttributeError):
            pass
    if sampler["returncode"] != 0:
        sampler["log_tail"] = text[-1500:]


# -- one round: one job process, a series of windows ----------------------------------------


def window_sequence(arms: list[str], round_index: int, cycles: int) -> list[str]:
    """alone, S1, alone, S2, ..., alone: the sampled arms' order rotated every round, mirrored every cycle."""
    shift = round_index % len(arms)
    order = arms[shift:] + arms[:shift]
    sequence = ["alone"]
    for cycle in range(cycles):
        for arm in order if cycle % 2 == 0 else order[::-1]:
            sequence += [arm, "alone"]
    return sequence


def run_round(r: int, arms: list[str], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    sequence = window_sequence(arms, r, args.cycles)
    out = tmp / f"r{r}-steps.json"
    command = [
        sys.executable,
        os.path.relpath(WORKLOAD, _env.REPO),
        "--steps",
        str(args.steps or _auto_steps(sequence, args)),
        "--warmup",
        str(args.warmup),
        "--out",
        str(out),
        "--until-eof",
    ]
    stderr_path = tmp / f"r{r}-job.err"
    with open(stderr_path, "wb") as stderr:
        job = subprocess.Popen(
            command,
            cwd=_env.REPO,
            env={**os.environ, **CHILD_ENV},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        line = job.stdout.readline().decode(errors="replace").strip()
        if not line.startswith("ready"):
            job.kill()
            job.wait()
            raise SystemExit(
                f"attach_overhead: the job did not get ready ({line!r}):\n"
                f"{stderr_path.read_text(errors='replace')[-3000:]}"
            )
        round_started = time.perf_counter()
        windows: list[dict[str, Any]] = []
        for i, arm in enumerate(sequence):
            if job.poll() is not None:  # ran out of --steps: later windows would hold no steps
                _progress(f"round {r + 1}: the job finished before window {i + 1}/{len(sequence)}")
                break
            # A short pause between windows: the step that straddles an edge belongs to neither, and
            # the machine settles after a sampler has exited.
            time.sleep(args.gap)
            busy_before, job_before = _env.system_busy_s(), _process_cpu_s(job.pid)
            t0 = time.perf_counter()
            sampler = None
            if arm in ("py-spy", "attach"):
                sampler = run_sampler(arm, job.pid, args, tmp, f"r{r}-w{i}-{arm}")
            else:
                time.sleep(args.duration)
            t1 = time.perf_counter()
            busy_after, job_after = _env.system_busy_s(), _process_cpu_s(job.pid)
            wall = t1 - t0
            window: dict[str, Any] = {"index": i, "arm": arm, "t0": t0, "t1": t1, "wall_s": wall}
            if job_before is not None and job_after is not None:
                window["job_cpu_cores"] = (job_after - job_before) / wall
            if busy_before is not None and busy_after is not None:
                # Cores busy machine-wide; less the job's and the sampler's: what other work took.
                window["machine_busy_cores"] = (busy_after - busy_before) / wall
                if "job_cpu_cores" in window:
                    own = window["job_cpu_cores"] + (sampler["cpu_s"] / wall if sampler else 0.0)
                    window["background_cores"] = max(window["machine_busy_cores"] - own, 0.0)
            window["sampler"] = sampler
            windows.append(window)
        job.stdin.close()  # the job stops at its next step
        tail = job.stdout.read().decode(errors="replace").strip()
        job.wait(timeout=120)
    if job.returncode != 0 or not out.exists():
        raise SystemExit(
            f"attach_overhead: the job failed (exit {job.returncode}):\n"
            f"{stderr_path.read_text(errors='replace')[-3000:]}"
        )
    record = json.loads(out.read_text(encoding="utf-8"))
    starts, times = record["step_start_s"], record["step_time_s"]

    def steps_between(t0: float, t1: float) -> list[float]:
        # The steps wholly inside [t0, t1], nothing that straddles its edges.
        return [d for s, d in zip(starts, times) if s >= t0 and s + d <= t1]

    def stats(inside: list[float]) -> dict[str, Any]:
        return {
            "steps": len(inside),
            "median_ms": statistics.median(inside) * 1e3 if inside else None,
            "p10_ms": _quantile(inside, 0.10) * 1e3 if inside else None,
            "p90_ms": _quantile(inside, 0.90) * 1e3 if inside else None,
            "step_times_ms": [round(d * 1e3, 4) for d in inside],
        }

    for window in windows:
        window.update(stats(steps_between(window["t0"], window["t1"])))
        sampler = window["sampler"]
        if sampler is not None:
            sampler_details(window)
            sampler["cpu_pct_of_core"] = 100 * sampler["cpu_s"] / window["wall_s"]
            if sampler.get("pyspy_seen") is not None:
                # attach while its py-spy ran: comparable with the py-spy arm's windows.
                window["sampling"] = stats(steps_between(sampler["pyspy_seen"], sampler["pyspy_gone"]))
                window["sampling"]["wall_s"] = sampler["pyspy_gone"] - sampler["pyspy_seen"]
    for i, window in enumerate(windows):
        # A-B-A: each non-alone window against the mean of the alone windows on either side.
        window["ratio_pct"] = None
        if window["arm"] == "alone" or not 0 < i < len(windows) - 1:
            continue
        before, after = windows[i - 1], windows[i + 1]
        if (
            before["steps"] < args.min_steps
            or after["steps"] < args.min_steps
            or (window["sampler"] is not None and window["sampler"]["returncode"] != 0)
        ):
            continue
        reference = 0.5 * (before["median_ms"] + after["median_ms"])
        # The fast steps: a second lens, less moved by the machine's slow stretches.
        reference_p10 = 0.5 * (before["p10_ms"] + after["p10_ms"])
        for part in (window, window.get("sampling")):
            if part is not None and part["steps"] >= args.min_steps:
                part["ratio_pct"] = 100 * (part["median_ms"] / reference - 1)
                part["ratio_p10_pct"] = 100 * (part["p10_ms"] / reference_p10 - 1)
    for window in windows:  # relative to the first window, for reading the file
        window["t0"], window["t1"] = window["t0"] - round_started, window["t1"] - round_started
        sampler = window["sampler"]
        if sampler is not None and sampler.get("pyspy_seen") is not None:
            sampler["pyspy_seen"] -= round_started
            sampler["pyspy_gone"] -= round_started
    return {
        "round": r,
        "job_pid": record["pid"],
        "job_steps": record["steps"],
        "job_stopped_early": record["stopped_early"],
        "job_final_loss": record["final_loss"],
        "job_output": tail,
        "sequence": sequence,
        "windows": windows,
    }


# -- summary --------------------------------------------------------------------------------


def summarize(rounds: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Per arm: pooled step statistics, and the overhead as the median over rounds of the round's ratio."""
    keys = ["alone", *arms]
    if "attach" in arms:
        keys.append("attach-sampling")
    summary: dict[str, Any] = {}
    for key in keys:
        # (round, scored part, its window): for attach-sampling the part is the window's sub-window.
        parts = [
            (r["round"], w.get("sampling") if key == "attach-sampling" else w, w)
            for r in rounds
            for w in r["windows"]
            if w["arm"] == key.removesuffix("-sampling")
        ]
        parts = [(r, part, w) for r, part, w in parts if part is not None]
        pooled = [t for _, part, _ in parts for t in part["step_times_ms"]]
        entry: dict[str, Any] = {
            "label": ARM_LABELS[key],
            "windows": len(parts),
            "steps": len(pooled),
            "median_ms": statistics.median(pooled) if pooled else None,
            "p10_ms": _quantile(pooled, 0.10) if pooled else None,
            "p90_ms": _quantile(pooled, 0.90) if pooled else None,
            "window_median_ms": _range_of([p["median_ms"] for _, p, _ in parts if p["median_ms"]]),
            "window_wall_s": _median([p.get("wall_s") for _, p, _ in parts]),
            "background_cores": _median([w.get("background_cores") for _, _, w in parts]),
        }
        if key != "alone":
            for lens, field in (("", "ratio_pct"), ("_p10", "ratio_p10_pct")):
                per_round, scored = [], []
                for r in rounds:
                    ratios = [p[field] for i, p, _ in parts if i == r["round"] and p.get(field) is not None]
                    if ratios:
                        per_round.append(statistics.median(ratios))
                        scored.append(r["round"])
                every = [p[field] for _, p, _ in parts if p.get(field) is not None]
                entry.update(
                    {
                        f"overhead{lens}_pct": statistics.median(per_round) if per_round else None,
                        f"per_round{lens}_pct": per_round,
                        f"scored_rounds{lens}": scored,
                        f"spread{lens}_pct": [min(per_round), max(per_round)] if per_round else None,
                        f"window_ratios{lens}_pct": every,
                        # Over windows: how precisely this run pins the median window ratio down.
                        f"window_ci95{lens}_pct": _bootstrap_median_ci(every) if len(every) > 2 else None,
                    }
                )
        samplers = [w["sampler"] for _, _, w in parts if w["sampler"]]
        if samplers and key != "attach-sampling":
            entry.update(
                failed_windows=sum(1 for s in samplers if s["returncode"] != 0),
                sampler_cpu_pct_of_core=_median([s["cpu_pct_of_core"] for s in samplers]),
                samples_per_window=_median([s.get("samples") for s in samplers]),
                main_thread_samples_per_window=_median([s.get("main_thread_samples") for s in samplers]),
                sampler_errors=sum(s.get("errors") or 0 for s in samplers),
            )
        summary[key] = entry

    # The noise floor: what the estimator gives with nothing attached.
    null = summary.get("null", {})
    floor = max((abs(x) for x in null.get("per_round_pct") or []), default=None)
    for key in keys[1:]:
        entry = summary[key]
        if key == "null":
            entry["verdict"] = "the noise floor"
        else:
            _judge(entry, floor)
    return {"arms": summary, "noise_floor_pct": floor, "by_load": by_load(rounds, summary)}


def by_load(rounds: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """The overheads again over the rounds on a quiet machine and over those with other load, apart.

    On a 2-core machine another busy process changes what a sampler costs: with both cores taken,
    its CPU comes out of the job's share. Rounds are split by the other processes' load measured
    in /proc/stat (median over the round's windows), which the step times do not enter.
    """
    load = {r["round"]: _median([w.get("background_cores") for w in r["windows"]]) for r in rounds}
    split: dict[str, Any] = {}
    for name, keep in (
        ("quiet", lambda x: x is not None and x < BUSY_CORES),
        ("busy", lambda x: x is not None and x >= BUSY_CORES),
    ):
        chosen = [r for r, x in load.items() if keep(x)]
        if not chosen:
            continue
        arms = {}
        for key, entry in summary.items():
            if key == "alone":
                continue
            values = [v for r, v in zip(entry["scored_rounds"], entry["per_round_pct"]) if r in chosen]
            arms[key] = {
                "overhead_pct": statistics.median(values) if values else None,
                "per_round_pct": values,
                "spread_pct": [min(values), max(values)] if values else None,
            }
        split[name] = {
            "rounds": chosen,
            "background_cores": [round(load[r], 3) for r in chosen],
            "arms": arms,
        }
    return split


def _judge(entry: dict[str, Any], floor: float | None) -> None:
    """Within noise or not, against the goal or not; as fields of ``entry`` and one short phrase."""
    pct, spread = entry.get("overhead_pct"), entry.get("spread_pct")
    if pct is None:
        entry["verdict"] = "no usable window"
        return
    reasons = []
    if spread and spread[0] <= 0 <= spread[1]:
        reasons.append(f"the per-round range {spread[0]:+.2f}..{spread[1]:+.2f}% includes 0")
    if floor is not None and abs(pct) <= floor:
        reasons.append(f"|{pct:+.2f}%| is no more than the null arm's {floor:.2f}%")
    entry.update(
        within_noise=bool(reasons),
        noise_reasons=reasons,
        meets_goal=pct <= GOAL_PCT,
        every_round_meets_goal=bool(spread) and spread[1] <= GOAL_PCT,
    )
    noise = "within noise" if reasons else "above noise"
    goal = "under" if pct <= GOAL_PCT else "over"
    every = ", every round under" if entry["every_round_meets_goal"] else ""
    entry["verdict"] = f"{noise}; {goal} {GOAL_PCT:g}%{every}"


def print_report(result: dict[str, Any]) -> None:
    s = result["settings"]
    print(
        f"\ntrainmedic attach overhead: {os.path.basename(s['workload'])} ({WORKLOAD_MODEL}); "
        f"{s['rounds']} rounds (a fresh job each), {s['duration_s']} s windows, sampling at {s['rate_hz']} Hz"
    )
    print(
        f"windows in round 1: {' '.join(result['rounds'][0]['sequence'])} (sampled arms rotated each round)"
    )
    header = (
        f"{'arm':<18} {'windows':>7} {'steps':>6} {'window':>6} {'median ms':>9} {'p10 ms':>7} {'p90 ms':>7} "
        f"{'sampler CPU':>11} {'samples':>7} {'other load':>10}"
    )
    print(header)
    print("-" * len(header))
    for e in result["arms"].values():
        cpu = e.get("sampler_cpu_pct_of_core")
        print(
            f"{e['label']:<18} {e['windows']:>7} {e['steps']:>6} {_num(e['window_wall_s'], 5, 1)}s "
            f"{_num(e['median_ms'], 9, 2)} {_num(e['p10_ms'], 7, 2)} {_num(e['p90_ms'], 7, 2)} "
            f"{f'{cpu:.1f}% core' if cpu is not None else '-':>11} "
            f"{_num(e.get('main_thread_samples_per_window'), 7, 0)} "
            f"{_num(e['background_cores'], 4, 2)} cores"
        )
    print(
        "median, p10, p90: over all steps of the arm's windows; samples: the training thread's per window "
        "(py-spy's file);\nother load: cores other processes kept busy (median over windows)"
    )
    header = (
        f"\n{'overhead vs alone':<18} {'median':>8} {'per-round min..max':>19} {'windows 95% CI':>17} "
        f"{'p10 lens':>9} {'per-round min..max':>19}  verdict (median lens)"
    )
    print(header)
    print("-" * (len(header) - 1))
    for key, e in result["arms"].items():
        if key == "alone":
            continue
        print(
            f"{e['label']:<18} {_pct(e['overhead_pct']):>8} {_fmt_range(e['spread_pct']):>19} "
            f"{_fmt_range(e['window_ci95_pct']):>17} {_pct(e['overhead_p10_pct']):>9} "
            f"{_fmt_range(e['spread_p10_pct']):>19}  {e.get('verdict', '')}"
        )
    print(
        "overhead: median over rounds of the round's median of (the window's median step / the mean of the "
        "medians of the alone\nwindows on either side) - 1; p10 lens: the same with each window's 10th "
        "percentile step; 95% CI: bootstrap of the median over all windows"
    )
    if "attach-sampling" in result["arms"]:
        print(
            "trainmedic attach: the whole command (start-up, sampling, diagnosis); 'while sampling': the steps "
            "while its py-spy child ran, scored against the same alone windows"
        )
    if result["noise_floor_pct"] is not None:
        print(
            f"noise floor: the null arm (nothing attached) reaches {result['noise_floor_pct']:.2f}% in a round"
        )
    alone = result["arms"]["alone"]["window_median_ms"]
    if alone:
        print(f"alone windows' median step ranged {alone[0]:.2f}..{alone[1]:.2f} ms over the run")
    for name, part in result["by_load"].items():
        if len(result["by_load"]) < 2:
            break  # one kind of round only: the table above is that
        what = "on a quiet machine" if name == "quiet" else "with other load"
        arms = ", ".join(
            f"{result['arms'][k]['label'].strip()} {_pct(a['overhead_pct'])} ({_fmt_range(a['spread_pct'])})"
            for k, a in part["arms"].items()
        )
        n = len(part["rounds"])
        print(f"{n} round{'s' if n > 1 else ''} {what}: {arms}")
    if result["busy_machine"]:
        print(
            f"NOTE: other processes kept {result['background_cores_median']:.2f} cores busy (median over windows) "
            "on this machine: the numbers are noisier than on an idle one"
        )
    print(f"attach arm: {result['attach_arm']['note']}")
    print(f"\nverdict: {result['verdict']}")
    print(
        f"goal (sampling at {s['rate_hz']} Hz costs <= {GOAL_PCT:g}% per step): {result['outcome'].upper()}"
    )


# -- main -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="job processes, one round each (default 5)")
    parser.add_argument(
        "--steps",
        type=int,
        default=0,
        help="steps each job runs at most (default: enough for all its windows; it stops after the last)",
    )
    parser.add_argument("--rate", type=int, default=100, help="samples per second (default 100)")
    parser.add_argument(
        "--duration",
        type=int,
        default=2,
        help="seconds per window, whole seconds as py-spy takes (default 2)",
    )
    parser.add_argument(
        "--cycles", type=int, default=2, help="passes over the sampled arms per round (default 2)"
    )
    parser.add_argument(
        "--warmup", type=int, default=30, help="job steps before its first window (default 30)"
    )
    parser.add_argument(
        "--gap", type=float, default=0.3, help="seconds left out between windows (default 0.3)"
    )
    parser.add_argument(
        "--min-steps", type=int, default=20, help="windows with fewer steps are not scored (default 20)"
    )
    parser.add_argument("--no-attach", action="store_true", help="skip the trainmedic attach arm")
    parser.add_argument("--no-null", action="store_true", help="skip the null (nothing attached) arm")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2 rounds, 1 s windows, writes nothing"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no result file")
    parser.add_argument("--out", type=Path, help="result file (default results/attach_overhead-<date>.json)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.cycles, args.warmup = 2, 1, 1, 15
        args.no_write = args.out is None
    if args.duration < 1 or args.rounds < 1 or args.cycles < 1:
        parser.error("--duration, --rounds and --cycles must be at least 1")
    if "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
        # The job's step stamps and this process's window edges must come from one clock.
        raise SystemExit("attach_overhead: needs perf_counter on CLOCK_MONOTONIC (Linux)")
    if not PY_SPY.exists():
        raise SystemExit(f"attach_overhead: no py-spy next to this interpreter ({PY_SPY})")
    pyspy_version = subprocess.run(
        [str(PY_SPY), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trainmedic-attach-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        if args.no_attach:
            attach_ok, note, probe = False, "skipped (--no-attach)", {}
        else:
            attach_ok, note, probe = probe_attach(args.rate, tmp)
        _progress(f"attach arm: {note}")
        arms = [*([] if args.no_null else ["null"]), "py-spy", *(["attach"] if attach_ok else [])]
        rounds = []
        for r in range(args.rounds):
            rounds.append(run_round(r, arms, args, tmp))
            line = "  ".join(
                f"{w['arm']} {w['median_ms']:.2f}"
                + (f" ({w['ratio_pct']:+.1f}%)" if w["ratio_pct"] is not None else "")
                + (
                    f" [sampling {w['sampling']['ratio_pct']:+.1f}%]"
                    if w.get("sampling", {}).get("ratio_pct") is not None
                    else ""
                )
                for w in rounds[-1]["windows"]
                if w["median_ms"] is not None
            )
            _progress(f"round {r + 1}/{args.rounds} ms/step: {line}")

    summary = summarize(rounds, arms)
    # The goal is about sampling: py-spy as attach runs it, and attach while its py-spy runs.
    scored = [key for key in ("py-spy", "attach-sampling") if key in summary["arms"]]
    meets = all(summary["arms"][k].get("meets_goal", False) for k in scored)
    # Whether this run could tell 2 % from 0 at all: nothing attached moved the estimate less.
    floor = summary["noise_floor_pct"]
    resolved = floor is not None and floor <= GOAL_PCT
    verdict = "; ".join(
        f"{summary['arms'][k]['label'].strip()} "
        + (
            f"{summary['arms'][k]['overhead_pct']:+.2f}% per step ({summary['arms'][k]['verdict']})"
            if summary["arms"][k]["overhead_pct"] is not None
            else "no usable window"
        )
        for k in ("py-spy", "attach", "attach-sampling")
        if k in summary["arms"]
    )
    if not resolved:
        verdict += (
            f"; the noise floor ({floor:.2f}%) is above the {GOAL_PCT:g}% goal: this run cannot confirm it"
            if floor is not None
            else "; no null arm: the noise floor is unknown"
        )
    background = _median([w.get("background_cores") for r in rounds for w in r["windows"]])
    environment = _env.environment()
    environment["versions"]["py-spy"] = pyspy_version.split()[-1] if pyspy_version else None
    result: dict[str, Any] = {
        "benchmark": "attach_overhead",
        **environment,
        "settings": {
            "workload": os.path.relpath(WORKLOAD, _env.REPO),
            "workload_model": WORKLOAD_MODEL,
            "rounds": args.rounds,
            "cycles_per_round": args.cycles,
            "duration_s": args.duration,
            "rate_hz": args.rate,
            "gap_s": args.gap,
            "warmup_steps": args.warmup,
            "min_steps_per_window": args.min_steps,
            "arms": {
                "py-spy": _show(pyspy_command(0, args.duration, args.rate, Path("FILE")), 0),
                "attach": _show(attach_command(0, args.duration, args.rate, Path("FILE")), 0),
            },
            "method": (
                "one job process per round; windows alone / sampled alternate in it (A-B-A); per window the "
                "median of the steps wholly inside it; a sampled window's overhead = its median / mean of the "
                "neighbouring alone windows' medians - 1; per arm the median over rounds of the round's median "
                "ratio, spread = min..max over rounds; 'null' = an alone window scored as if sampled (noise floor)"
            ),
        },
        "attach_arm": {"measured": attach_ok, "note": note, "probe": probe},
        **summary,
        "goal_pct": GOAL_PCT,
        # pass / fail by the point estimates when the null arm stayed within the goal; otherwise
        # this run could not tell 2 % from 0 and says so rather than a pass or a fail.
        "outcome": ("pass" if meets else "fail") if resolved else "unresolved",
        "pass": meets,
        # Both: the point estimates are under the goal and nothing attached moved the estimate less.
        "pass_criterion": f"overhead_pct <= {GOAL_PCT:g} for {', '.join(scored)}",
        "verdict": verdict,
        "background_cores_median": background,
        "busy_machine": background is not None and background > BUSY_CORES,
        "rounds": rounds,
        "load_average_after": _env.load_average(),
        "benchmark_seconds": time.perf_counter() - started,
    }
    print_report(result)
    if not args.no_write:
        _env.write_result(result, args.out or _env.results_path("attach_overhead"))
    return {"pass": 0, "fail": 1}.get(result["outcome"], 3)


# -- helpers --------------------------------------------------------------------------------


def _auto_steps(sequence: list[str], args: argparse.Namespace) -> int:
    # Enough for every window at 5 ms a step (faster than this loop runs anywhere it was tried),
    # attach's start-up included; the job is stopped after the last window anyway.
    seconds = len(sequence) * (args.duration + args.gap + 15)
    return args.warmup + int(seconds / 0.005)


def _has_child_named(pid: int, name: str) -> bool:
    """Whether a direct child of ``pid`` runs the program ``name`` (from /proc; False if unreadable)."""
    try:
        children = [
            int(c)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text(encoding="ascii").split()
        ]
    except (OSError, ValueError):
        return False
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text(encoding="ascii").strip() == name:
                return True
        except OSError:
            continue
    return False


def _process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of a running process, from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bootstrap_median_ci(values: list[float], resamples: int = 2000, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return [medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _range_of(values: list[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def _show(command: list[str], pid: int) -> str:
    shown = ["python" if c == sys.executable else c for c in command]
    shown = ["py-spy" if c == str(PY_SPY) else c for c in shown]
    return " ".join("PID" if c == str(pid) else c for c in shown)


def _fmt_range(pair: list[float] | None) -> str:
    return f"{pair[0]:+.2f}..{pair[1]:+.2f}%" if pair else "-"


def _pct(value: float | None) -> str:
    return f"{value:+.2f}%" if value is not None else "-"


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _progress(message: str) -> None:
    print(f"[attach_overhead] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
