"""The report's notes: how the steps were marked, what each probe measured, and what it could not.

``run_notes`` go with a verdict; ``thin_notes`` say why a run with no step to rest on has none.
"""

from __future__ import annotations

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


def _sampler(m: Measurements) -> list[str]:
    if not m.samples:
        return []
    return [
        f"Stack sampler: {m.samples} samples at {m.sampler_interval_s * 1e3:.0f} ms, "
        f"its own time {m.sampler_busy_s / max(m.wall_s, 1e-9):.2%} of the run."
    ]
