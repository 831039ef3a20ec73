"""The report's notes: how the steps were marked, what each probe measured, and what it could not.

``run_notes`` go with a verdict; ``thin_notes`` say why a run with no step to rest on has none.
"""

from __future__ import annotations

from trainmedic.run.probe import outside
from trainmedic.run.probe.clock import LOOP
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.probe.session import Measurements


def thin_notes(m: Measurements, run: RunOutcome, evidence: str) -> list[str]:
    wall = f"{m.wall_s:.2f} s"
    if evidence == "none":
        how = {"interrupted": "was stopped", "exit": "exited"}.get(run.outcome, "failed")
        what = f" ({run.message})" if run.message else ""
        notes = [
            (
                f"The script {how} before its first step{what}, after {wall}: nothing was measured that a "
                "verdict could rest on, so no bottleneck is named. The times below are of the whole run."
            )
        ]
    elif m.step_source is not None:
        counted = len(m.warmup_durations) + m.steady_steps
        notes = [
            (
                f"{counted} step(s) were counted ({m.step_source}), too few and too short for the stack sampler "
                f"(every {m.sampler_interval_s * 1e3:.0f} ms) to see inside one: no bottleneck is named, and the "
                f"times below are of the whole run ({wall}). Let it run more steps."
            )
        ]
    else:
        why = f" ({m.loop_problem})" if m.loop_problem else ""
        notes = [
            (
                "No steps were detected (no optimizer.step(), Keras fit, DataLoader iteration or trainmedic.step()), "
                f"and no loop held most of the run's time{why}: no bottleneck is named, and the times below are of "
                f"the whole run ({wall}), not per step. Mark each step with `import trainmedic` and "
                "`trainmedic.step()` at the end of the loop body."
            )
        ]
    if m.max_steps is not None and m.step_source is None:
        notes.append(f"--steps {m.max_steps} could not stop the run: it never counted a step.")
    notes.extend(_sampler(m))
    return notes


def run_notes(m: Measurements, scope: str, anchored: bool, loops) -> list[str]:
    notes = []
    if m.step_source == LOOP:
        notes.append(
            "No optimizer.step(), Keras fit, DataLoader iteration or trainmedic.step() was seen: each iteration of "
            f"the loop at {m.loop} counts as one step (first {m.warmup} excluded as warm-up). Mark the steps with "
            "`trainmedic.step()` if they are something else."
        )
    elif scope == "warmup":
        notes.append(
            f"Only {len(m.warmup_durations)} step(s) ran, all within warm-up: the breakdown covers warm-up steps."
        )
    else:
        notes.append(f"Steps marked by {m.step_source}; first {m.warmup} warm-up step(s) excluded.")
    if m.setup_s > 0:
        notes.append(f"Set-up before the first step took {m.setup_s:.2f} s (not in the breakdown).")
    if m.device.kind == "cpu":
        notes.append(f"CUDA {m.device.details.get('cuda', 'not available')}.")
    notes.extend(_sampler(m))
    if m.census.counted:
        c = m.census
        own = sum(t.calls for t in c.by_function.values()) / c.steps
        floor = c.floors.get("cuda", c.floors.get("cpu"))
        notes.append(
            f"Op census over {c.steps} warm-up step(s): {own:,.0f} torch calls per step made by your own lines, "
            f"{c.library_calls / c.steps:,.0f} by libraries on their behalf (modules, optimizer, clipping), "
            f"{c.loader_calls / c.steps:,.0f} inside a DataLoader's fetch; this machine starts a call in "
            f"{floor.floor_s * 1e6:.1f} µs. Your plain code was classified by what its calls touch "  # type: ignore[union-attr]
            "(the model's tensors: compute; others: data), not by where it sits in the step."
        )
    elif m.census_steps:
        ops = sum(m.ops_by_function.values()) / m.census_steps
        notes.append(f"Op census over {m.census_steps} warm-up step(s): {ops:,.0f} torch calls per step.")
    elif m.steady_steps:
        notes.append(
            "No op census ran (too few steps): your plain code was classified by its position in the step "
            "(before the model: data; after it: compute), which is a guess."
        )
    if m.device.kind == "cuda":
        notes.append(
            "Each step boundary waits for the step's queued CUDA work, so asynchronous kernels are "
            "charged to the step that launched them rather than to a later sync point."
        )
        nvml = m.device.details.get("nvml", {})
        if nvml.get("available"):
            notes.append(
                f"NVML: GPU busy {nvml.get('util_gpu_pct_mean', '?')} % on average, power "
                f"{nvml.get('power_w_mean', '?')} W of {nvml.get('power_limit_w', '?')} W, "
                f"SM clock {nvml.get('sm_clock_mhz_mean', '?')} MHz, P-state {nvml.get('pstate_mean', '?')}."
            )
        else:
            notes.append(f"NVML readings unavailable: {nvml.get('reason', 'unknown')}.")
        if m.device_busy.problem and m.census.counted:
            notes.append(
                f"The GPU's own busy time was not measured ({m.device_busy.problem}): a model bound by its "
                "kernels and one waiting on their launches could not be told apart."
            )
    return notes


#: No step, and this share of a window's samples on one line of the user's: the job is stuck there.
STUCK_SHARE = 0.95


def outside_notes(m: Measurements) -> list[str]:
    """What a report read from outside rests on, and what it cannot know (``trainmedic attach``)."""
    window = f"{m.samples} samples over {m.wall_s:.1f} s"
    if m.step_source == outside.SAMPLED_LOOP:
        steps = (
            f"Steps are the iterations of the loop at {m.loop}, found in the order of the samples "
            f"({m.steady_steps} whole ones; the one the window began in and the one it ended in are left out)."
        )
    elif m.step_source == outside.SAMPLED_OPTIMIZER:
        steps = (
            f"Steps end where the samples leave the optimizer's step ({m.steady_steps} whole ones; the first and "
            "last are left out)."
        )
    elif m.loop:
        steps = (
            f"No step was seen: the loop at {m.loop} held most samples, but no iteration of it could be told from "
            "the next (each one shorter than the time between two samples, or the job stuck inside one). No "
            "bottleneck is named; the times are of the whole window, and the lines below say where it went."
        )
    else:
        steps = (
            "No step was seen: no loop of yours held most samples, and none left an optimizer step often enough. "
            "No bottleneck is named; the times are of the whole window. A job stuck in one place shows here as "
            "one line holding every sample: `trainmedic attach --dump PID` shows each thread's stack."
        )
    notes = [
        f"Read from outside ({m.outside}): {window}. The job was not paused or changed. {steps}",
    ]
    if m.step_source is None and m.setup.seconds > 0:
        lines: dict[str, float] = {}
        for (_, _, where, _), seconds in m.setup.lines.items():
            if where is not None:
                lines[where] = lines.get(where, 0.0) + seconds
        where = max(lines, key=lambda w: lines[w], default=None)
        if where is not None and lines[where] >= STUCK_SHARE * m.setup.seconds:
            notes.insert(
                0,
                f"Stuck: {lines[where] / m.setup.seconds:.0%} of the samples over {m.wall_s:.1f} s were at {where}: "
                "the job has not moved from that line (or one call there runs that long). "
                "`trainmedic attach --dump PID` shows every thread's stack.",
            )
    per_step = outside.samples_per_step(m)
    if m.step_source is not None and per_step < outside.MIN_SAMPLES_PER_STEP:
        notes.append(
            f"A step held {per_step:.1f} samples (median): steps that short can fall between two samples, so "
            "the step count is low and the step time high; the shares are still the samples' own. Sample longer "
            "or at a higher --rate for step times, or run the script under `trainmedic run`."
        )
    notes.append(
        "Not measurable from outside, so not judged: tiny tensor ops (no op census counts the calls), "
        "waits inside .item()/.cpu() on a GPU (no timer), DataLoader worker items. Time in your own lines "
        "with no library under them is shown as 'own code', not guessed; `trainmedic run` measures all of these."
    )
    nvml = m.device.details.get("nvml", {})
    if m.device.kind == "cuda" and nvml.get("available"):
        notes.append(
            f"NVML: GPU busy {nvml.get('util_gpu_pct_mean', '?')} % on average over the window, "
            f"memory used {nvml.get('memory_used_bytes_max', 0) / 2**30:.1f} GiB at most, power "
            f"{nvml.get('power_w_mean', '?')} W of {nvml.get('power_limit_w', '?')} W."
        )
    return notes


def _sampler(m: Measurements) -> list[str]:
    if not m.samples:
        return []
    return [
        f"Stack sampler: {m.samples} samples of the training thread's stack, one every "
        f"{m.sampler_interval_s * 1e3:.0f} ms on average (jittered, so that no step length locks onto it); "
        f"its own CPU time {m.sampler_busy_s / max(m.wall_s, 1e-9):.1%} of the run's wall time."
    ]
