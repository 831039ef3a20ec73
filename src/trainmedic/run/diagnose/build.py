"""Build a Report from what a watch session measured."""

from __future__ import annotations

import statistics
from collections import defaultdict

from trainmedic._version import __version__
from trainmedic.categories import CATEGORIES, COMPUTE, DATA, MEMORY_BANDWIDTH, TINY_OPS
from trainmedic.run.diagnose import (
    amdahl,
    confirmed,
    growth,
    intensity,
    launches,
    loop_facts,
    margin,
    notes,
    resolve,
    steps,
)
from trainmedic.run.diagnose.memory import memory_notes
from trainmedic.run.diagnose.rules import RULES, Context, tiny_ops
from trainmedic.run.probe import outside
from trainmedic.run.probe.clock import LOOP
from trainmedic.run.probe.recorder import SLOTS, Aggregate
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.probe.session import Measurements
from trainmedic.run.report.model import Finding, LineCost, Report, StepStats, TimelinePoint
from trainmedic.units import format_seconds

#: Findings below this share of the step are noise, not advice (TF Profiler's "moderately
#: input-bound" starts at 5 %).
MIN_SHARE = 0.05
MAX_LINES = 12
#: The model's own time: compute, or memory_bandwidth when its counted ops are bandwidth-bound.
_MODEL = (COMPUTE, MEMORY_BANDWIDTH)


def diagnose(m: Measurements, command: list[str], run: RunOutcome) -> Report:
    aggregate, scope, n_steps = _scope(m)
    evidence = _evidence(m, scope, run)
    if evidence not in ("steps", "loop", "sampled"):
        return _without_steps(m, command, run, aggregate, evidence)
    anchored = resolve.anchors_seen(aggregate)
    # A loop whose iterations run no forward, backward or optimizer step is a per-sample loop
    # (a per-sample generator): one iteration is one sample. With model work in it, an iteration
    # is a training step (a hand-written SGD update) and a step's threshold applies.
    per_sample = evidence == "loop" and not anchored
    min_ops = resolve.TINY_MIN_OPS_PER_ITERATION if per_sample else resolve.TINY_MIN_OPS
    loops = resolve.tiny_loops(
        aggregate, n_steps, m.ops_by_function, m.census_steps, min_ops, waits=m.sync_waits, census=m.census
    )
    costs = resolve.resolve(aggregate, anchored, loops, m.ops_by_function, m.census, outside=bool(m.outside))
    # GPU runs: timed waits in sync calls, the counted ops' roofline (resolve.on_device).
    bound = intensity.judge(m.op_costs, m.device)
    costs = resolve.on_device(costs, bound, resolve.waiting_lines(aggregate, m.sync_waits))
    # ... and the device's own busy time: a model whose kernels leave the GPU idle is launch-bound.
    launch = launches.judge(costs, m.device_busy, n_steps)
    costs = launches.settle(costs, launch)
    total = sum(c.seconds for c in costs)

    breakdown = _breakdown(costs, total)
    if not total:
        breakdown[COMPUTE] = 1.0  # nothing sampled: no evidence of any waste
    bottleneck: str | None = max(CATEGORIES, key=lambda c: breakdown[c])

    durations = [d for _, d in m.durations]
    if m.outside and not outside.steps_timed(m):
        durations = []  # steps shorter than a few samples: counted (at least), not timed
    step_growth = steps.growth(durations)
    cpu = [c for _, c in m.cpu_durations] if m.device.kind != "cuda" else None
    stats = StepStats(
        count=m.steady_steps,
        median_s=statistics.median(durations) if durations else 0.0,
        p90_s=steps.percentile(durations, 0.9),
        growth=round(step_growth, 4),
        warmup=m.warmup,
        source=m.step_source,
        cpu_growth=round(steps.growth(cpu), 4) if cpu else None,
        loop=m.loop if m.step_source in (LOOP, outside.SAMPLED_LOOP) else None,
    )
    mapping = resolve.slot_mapping(costs)
    timeline = _timeline(m, mapping, breakdown)
    rising = steps.trend(durations, cpu)
    grown = (
        growth.attribute(
            timeline,
            rising,
            dict(m.cpu_durations) if cpu else {},
            dict(m.per_step),
            mapping,
            dict(m.model_durations),
        )
        if rising
        else None
    )
    growing = grown.category if grown else None
    findings = _findings(costs, total, n_steps, stats, m, loops, growing, rising, command, launch)
    findings, confirmation_notes = (
        confirmed.apply(findings, m.confirmation, step_limit=m.max_steps) if not m.outside else (findings, [])
    )
    measured = any(f.measured is not None for f in findings)
    if findings:
        bottleneck = findings[0].category  # the biggest lever (findings are ordered by what they buy)
        if confirmed.refuted(findings[0]):
            bottleneck = None  # the only finding was tried and bought nothing: no verdict
    close = margin.close_call(
        findings,
        m.per_step,
        mapping,
        more="sample longer (--duration)" if m.outside else "run more steps (--steps)",
    )

    return _report(
        m,
        command,
        run,
        evidence,
        steps=stats,
        breakdown=breakdown,
        bottleneck=bottleneck,
        close_call=[f.category for f in findings[:2]] if close else [],
        findings=findings,
        timeline=timeline,
        lines=_lines(costs, total, n_steps),
        # What the confirmation measured leads the notes; that a gain is only estimated ends them.
        notes=(confirmation_notes if measured else [])
        + [n for n in (close, launch.note() if launch else None, grown.note() if grown else None) if n]
        + (notes.outside_notes(m) if m.outside else notes.run_notes(m, scope, anchored, loops))
        + ([] if measured else confirmation_notes),
    )


def _report(
    m: Measurements, command: list[str], run: RunOutcome, evidence: str, notes: list[str], **verdict
) -> Report:
    """A Report: how the run went and what it ran on, with ``verdict``'s steps, breakdown and findings."""
    return Report(
        command=command,
        exit_code=run.exit_code,
        outcome=run.outcome,
        message=run.message,
        device=m.device,
        wall_s=round(m.wall_s, 4),
        setup_s=round(m.setup_s, 4),
        notes=notes + memory_notes(run.message, m.device),
        version=__version__,
        evidence=evidence,
        **verdict,
    )


def _evidence(m: Measurements, scope: str, run: RunOutcome) -> str:
    """What a verdict can rest on (report.model.EVIDENCE)."""
    if m.outside:
        return "sampled" if m.step_source is not None and scope != "setup" else "whole run"
    if m.step_source is not None and scope != "setup":
        return "loop" if m.step_source == LOOP else "steps"
    failed = run.outcome in ("exception", "interrupted") or (run.outcome == "exit" and run.exit_code != 0)
    return "none" if failed else "whole run"


def _without_steps(
    m: Measurements, command: list[str], run: RunOutcome, aggregate: Aggregate, evidence: str
) -> Report:
    """No complete step: where the run's time went, in whole-run seconds, and no verdict.

    Shares of a run that never reached its training loop are shares of imports and set-up: a
    bottleneck named from them would send the user after the wrong line (a script that raised at
    its third line once read as "compute, 75 %" there).
    """
    everything = Aggregate()
    for part in (m.setup, m.warm, m.steady):
        everything.merge(part)
    costs = resolve.resolve(
        everything, resolve.anchors_seen(everything), {}, m.ops_by_function, m.census, outside=bool(m.outside)
    )
    total = sum(c.seconds for c in costs)
    return _report(
        m,
        command,
        run,
        evidence,
        # Steps counted but never sampled inside (a few sub-millisecond ones) keep their count.
        steps=StepStats(
            count=m.steady_steps,
            median_s=0.0,
            p90_s=0.0,
            growth=1.0,
            warmup=len(m.warmup_durations),
            source=m.step_source,
            loop=m.loop if m.step_source in (LOOP, outside.SAMPLED_LOOP) else None,
        ),
        breakdown=_breakdown(costs, total),
        bottleneck=None,
        findings=[],
        lines=_lines(costs, total, 1),
        notes=notes.outside_notes(m) if m.outside else notes.thin_notes(m, run, evidence),
    )


def _breakdown(costs: list[resolve.Cost], total: float) -> dict[str, float]:
    breakdown = dict.fromkeys(CATEGORIES, 0.0)
    for cost in costs:
        breakdown[cost.category] += cost.seconds
    return {c: (s / total if total else 0.0) for c, s in breakdown.items()}


def _scope(m: Measurements) -> tuple[Aggregate, str, int]:
    """Steady state when there is one; else the warm-up steps; else everything before any step."""
    if m.steady.seconds > 0:
        return m.steady, "steady", max(m.steady_steps, 1)
    if m.warm.seconds > 0:
        return m.warm, "warmup", max(len(m.warmup_durations), 1)
    return m.setup, "setup", 1


def _findings(
    costs, total, n_steps, stats, m, loops, growing, rising, command=(), launch=None
) -> list[Finding]:
    # (category, kind) -> line (None: no line of its own) -> seconds
    groups: dict[tuple[str, str], dict[str | None, float]] = defaultdict(lambda: defaultdict(float))
    # Which function each line's time was spent in, so advice can name the function to change.
    functions: dict[tuple[str, str], dict[tuple[str | None, str | None], float]] = defaultdict(
        lambda: defaultdict(float)
    )
    phases: dict[str, float] = defaultdict(float)  # compute split by forward/backward/optimizer
    forward_lines: dict[str, float] = defaultdict(float)
    transform = sum(c.seconds for c in costs if (c.category, c.kind) == (DATA, "transform"))
    for cost in costs:
        kind, merged = cost.kind, False
        model_time = cost.category in _MODEL or cost.kind == launches.LAUNCHES
        if model_time:
            # The model's own time is one finding, whichever of forward/backward/step it was in.
            kind = "model" if cost.category in _MODEL else launches.LAUNCHES
            phase = cost.phase or cost.kind
            phases[phase] += cost.seconds
            if phase == "forward" and cost.where is not None:
                forward_lines[cost.where] += cost.seconds
        elif (cost.category, kind) == (DATA, "loader") and transform >= MIN_SHARE * total:
            # One DataLoader pipeline, one finding, at the user's transform: the sampler sees
            # the thread where it hands over the GIL, so a Python transform's time is partly
            # charged to the loader's next torch call (a heavy NumPy transform in mnist read
            # 37 % "loader" at the for line, 25 % at its own line).
            kind = "transform"
            merged = True
        at_line = None if merged else cost.where  # the loop's `for` line is not the transform's
        groups[(cost.category, kind)][at_line] += cost.seconds
        functions[(cost.category, kind)][(at_line, cost.function)] += cost.seconds
    # Parts of a step are stated against the mean step: the sampled seconds add up to it, so no
    # part is ever larger than its whole (a median can be smaller than a part's mean).
    durations = [d for _, d in m.durations]
    timed = not m.outside or outside.steps_timed(m)
    # Advice says "iteration" where a loop's iterations stood in for steps nobody marked; a loop
    # found from outside is the training loop, its iterations the job's steps.
    counted_loop = stats.loop if m.step_source == LOOP else None
    mean_step = statistics.fmean(durations) if durations else total / max(n_steps, 1)
    findings = []
    for (category, kind), by_where in groups.items():
        seconds = sum(by_where.values())
        # Clamped: the group's seconds and the total are summed in different orders, so a group
        # that is all of the time can come out a rounding error above 1.
        share = min(seconds / total, 1.0) if total else 0.0
        if share < MIN_SHARE:
            continue
        # The heaviest line of the user's in this category: loss.backward() when backward is
        # most of the model's time on a CPU. On a GPU the host waits for queued kernels wherever
        # the step boundary synchronises (the optimizer's line), so the model's heaviest forward
        # line is where its compute originates.
        model_time = category in _MODEL or kind == launches.LAUNCHES
        cuda_model = model_time and m.device.kind == "cuda" and forward_lines
        pool = forward_lines if cuda_model else by_where
        where = max((w for w in pool if w is not None), key=lambda w: pool[w], default=None)
        function = _function_at(functions[(category, kind)], where)
        items = m.worker_items if (category, kind) == (DATA, "loader") else None
        if items is not None and items.where:
            # The workers' time is in the user's code the main process never runs: point there.
            where, function = items.where, None
        if category == TINY_OPS and kind != launches.LAUNCHES:
            where = tiny_ops.batch_site(
                Context(where, 0.0, 0.0, m.device.kind, function=function, loop=counted_loop)
            )
        # The growth is the pool's when the category has one (its loader did not grow with it).
        grows = category == growing and (
            kind == resolve.BATCH_PREPARATION or (category, resolve.BATCH_PREPARATION) not in groups
        )
        if grows and kind == resolve.BATCH_PREPARATION:
            kind = "pool"  # batch preparation that gets slower every step: a growing structure
        loop = loop_facts.loop_of(loops, function) if category == TINY_OPS and not model_time else None
        ops = loop.ops_per_step if loop else max((x.ops_per_step for x in loops.values()), default=0.0)
        if model_time and m.census.counted:  # the model's calls: every call the census saw a step
            ops = (
                m.census.library_calls + sum(t.calls for t in m.census.by_function.values())
            ) / m.census.steps
        rise = rising.ratio if rising else stats.growth
        ctx = Context(
            where,
            seconds / n_steps,
            stats.median_s,
            m.device.kind,
            ops,
            rise,
            m.sources,
            function,
            step_source=m.step_source,
            loop=counted_loop,
            command=tuple(command),
            overhead_share=loop_facts.overhead_share(loop),
            device_busy_share=launch.ratio if launch is not None and model_time else None,
            loader_items=items,
        )
        advice = RULES[category](kind, ctx)
        unit = ctx.unit
        evidence = [
            (
                f"{share:.1%} of steady-state {unit} time "
                f"({format_seconds(share * mean_step)} of a {format_seconds(mean_step)} mean {unit})"
            )
            if timed
            else f"{share:.1%} of the sampled time ({format_seconds(seconds)} of {format_seconds(total)} sampled)"
        ]
        if where is not None and pool.get(where) and len(by_where) > 1:
            evidence.append(f"{pool[where] / seconds:.0%} of it at {where}")
        if model_time:
            split = ", ".join(
                f"{phase} {value / seconds:.0%}"
                for phase, value in sorted(phases.items(), key=lambda kv: -kv[1])
            )
            evidence.append(f"split: {split}")
        if loop is not None:
            evidence.append(loop_facts.evidence(loop, unit))
        if model_time and launch is not None:
            evidence.append(launch.evidence())
        if items is not None and items.measured:
            evidence.append(_items_evidence(items))
        evidence.extend(
            resolve.device_evidence(category, intensity.judge(m.op_costs, m.device), m.sync_waits, n_steps)
        )
        if grows:
            # The run's own trend is a growth finding's evidence (no fix is tried for it): how
            # steadily it rose says how well a trend explains the steps.
            series = [c for _, c in m.cpu_durations] if rising.measure == "CPU time per step" else durations
            evidence.append(
                f"{rising.measure} grew {rising.ratio:.2f}x from the first to the last quarter of the run "
                f"(Kendall's tau {steps.rank_correlation(series):.2f} between step order and {rising.measure}; "
                "1 is a step slower than every one before it)"
            )
        findings.append(
            Finding(
                category=category,
                share=round(share, 4),
                title=advice.title,
                evidence="; ".join(evidence),
                where=where,
                fix=advice.fix,
                expected_speedup=round(amdahl.expected_speedup(share, advice.factor), 2),
                ceiling=round(amdahl.ceiling(share), 2),
                kind=kind,
                suggestion=advice.suggestion,
            )
        )
    # The biggest lever first: what each fix buys, not how much time its category takes (a
    # re-read np.load at 45 % buys ×1.6-2.0, "healthy compute" at 54 % ×1.1). A lever goes
    # before the largest share only when it buys clearly more (margin.LEVER_MARGIN); where the
    # noise could put it on the other side of that line, margin.close_call says so.
    findings.sort(key=lambda f: (f.expected_speedup, f.share), reverse=True)
    largest = max(findings, key=lambda f: f.share, default=None)
    if largest is not None and findings[0] is not largest:
        if findings[0].expected_speedup < margin.LEVER_MARGIN * largest.expected_speedup:
            findings.remove(largest)
            findings.insert(0, largest)
    return findings


def _items_evidence(items) -> str:
    spent = f", {items.share:.0%} of it in {items.function}() at {items.where}" if items.where else ""
    return (
        f"{items.num_workers} DataLoader worker(s): one item took {format_seconds(items.seconds_per_item)} "
        f"fetched in this process after the run ({items.items} items){spent}"
    )


def _function_at(spent: dict[tuple[str | None, str | None], float], where: str | None) -> str | None:
    """The function most of the time at ``where`` was spent in (None when no line is known)."""
    at_where = {f: s for (w, f), s in spent.items() if w == where and where is not None and f is not None}
    return max(at_where, key=lambda f: at_where[f], default=None)


def _timeline(m: Measurements, mapping, breakdown) -> list[TimelinePoint]:
    vectors = dict(m.per_step)
    points = []
    for index, duration in m.durations:
        shares = dict.fromkeys(CATEGORIES, 0.0)
        slots = vectors.get(index)
        sampled = sum(slots) if slots else 0.0
        if sampled > 0 and slots:
            for slot, weight in zip(SLOTS, slots):
                for category, fraction in mapping.get(slot, {}).items():
                    shares[category] += weight * fraction / sampled
        else:
            shares.update(breakdown)  # a step shorter than the sampling interval
        points.append(
            TimelinePoint(index, round(duration, 6), {c: round(s * duration, 6) for c, s in shares.items()})
        )
    return points


def _lines(costs, total, n_steps) -> list[LineCost]:
    merged: dict[tuple[str, str, str], float] = defaultdict(float)
    for cost in costs:
        if cost.where is not None:
            merged[(cost.where, cost.category, cost.kind)] += cost.seconds
    top = sorted(merged.items(), key=lambda item: item[1], reverse=True)[:MAX_LINES]
    return [
        LineCost(w, c, k, round(s / n_steps, 6), round(s / total, 4) if total else 0.0)
        for (w, c, k), s in top
    ]
