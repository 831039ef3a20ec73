"""A thread's stacks, read from outside, turned into the measurements ``run``'s diagnosis reads.

Every sample goes through ``run``'s own classifier (``frames.FrameClassifier``, fed frames shaped
like live ones by ``foreign.py``) and into ``run``'s own recorder, so a category, a library and
a user line mean the same in ``trainmedic attach`` as in ``trainmedic run``.

What sampling from outside cannot give is left empty, never guessed: no hooks mark the steps,
no op census counts calls (tiny_ops needs it), no timer sees sync waits. The steps are found in
the order of the samples instead:

- the training loop is the innermost loop of the user's that holds most samples (the rule
  ``loops.LoopFinder`` applies to a live run); an iteration starts where the loop frame's line
  goes back up the loop body (a nested loop's own wrap-arounds do not count);
- with no loop of the user's on the stack (Keras ``fit``, Lightning, HF ``Trainer``), a step
  ends where a run of samples inside the optimizer ends.

A step shorter than a few sampling intervals can slip between two samples: the count is then
low and the step time high, and the report says so (:data:`MIN_SAMPLES_PER_STEP`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from trainmedic.run.probe.foreign import ForeignFrame, FrameBuilder
from trainmedic.run.probe.frames import PROBE, Classified, FrameClassifier
from trainmedic.run.probe.loops import Loop, LoopFinder, body_position
from trainmedic.run.probe.pyspy import ThreadTrace
from trainmedic.run.probe.recorder import Recorder
from trainmedic.run.probe.session import Measurements
from trainmedic.run.report.model import DeviceInfo

#: Step sources of a recording (report.steps.source).
SAMPLED_LOOP = "loop (sampled)"
SAMPLED_OPTIMIZER = "optimizer (sampled)"
#: Steps counted from fewer samples than this each are too short to time from outside.
MIN_SAMPLES_PER_STEP = 4
#: Fewer boundaries than this are no steps at all (a job stuck in one place, a set-up phase).
MIN_STEPS = 3
#: The first (partial) step is left out, as run leaves out its warm-up.
WARMUP = 1
_MODEL_KINDS = frozenset({"forward", "backward", "optimizer"})


@dataclass
class Sampled:
    """One thread's samples, classified, and the steps found in them."""

    classified: list[Classified]
    #: Index of the sample each step starts at (the boundaries), in order.
    starts: list[int] = field(default_factory=list)
    source: str | None = None
    loop: Loop | None = None


def classify(trace: ThreadTrace, classifier: FrameClassifier, builder: FrameBuilder) -> Sampled:
    frames = [builder.chain(stack) for stack in trace.stacks]
    classified = [classifier.classify(frame) for frame in frames]  # type: ignore[arg-type]
    sampled = Sampled(classified)
    loop = sampled.loop = training_loop(frames, classifier)
    # Only a loop that runs the model is timed by its iterations. A loop with no model in it
    # (a per-sample generator) iterates faster than the samples come: the few wraps
    # seen are chance, and five reads of one job found 0 to 8 "steps".
    model_seen = any(c.kind in _MODEL_KINDS and c.category != "data" for c in classified)
    if loop is not None and model_seen:
        starts = _loop_starts(frames, loop)
        if len(starts) >= MIN_STEPS:
            sampled.starts, sampled.source = starts, SAMPLED_LOOP
            return sampled
    starts = _optimizer_starts(classified)
    if len(starts) >= MIN_STEPS:
        sampled.starts, sampled.source = starts, SAMPLED_OPTIMIZER
    return sampled


def training_loop(frames: list[ForeignFrame | None], classifier: FrameClassifier) -> Loop | None:
    """The innermost loop of the user's holding at least 80 % of the samples, as ``run`` picks it."""
    if not frames:
        return None
    finder = LoopFinder(classifier, window=len(frames))
    votes: Counter[Loop] = Counter()
    for frame in frames:
        votes.update(finder.loops_on_stack(frame))  # type: ignore[arg-type]
    needed = finder.share * len(frames)
    # A loop nested in another holds a subset of its samples: the innermost that qualifies has
    # the fewest votes (a per-sample loop inside its epoch loop).
    qualifying = [loop for loop, n in votes.items() if n >= needed]
    return min(qualifying, key=lambda loop: votes[loop], default=None)


def measurements(
    sampled: Sampled, interval_s: float, wall_s: float, device: DeviceInfo, description: str
) -> Measurements:
    """``run``'s measurements of one thread's samples, each weighing ``interval_s``."""
    recorder = Recorder(warmup=WARMUP)
    starts = set(sampled.starts)
    # Step k runs from the k-th start to the next: step 0 is the one the recording began inside
    # (warm-up), the last is the one it ended inside (never folded). Without steps, everything
    # is step -1: the recorder's set-up, which carries no verdict.
    step = 0 if sampled.starts else -1
    anchored = False
    counts: dict[int, int] = {}
    for i, sample in enumerate(sampled.classified):
        if i in starts:
            step, anchored = step + 1, False
        if sample.kind == PROBE:
            continue
        if sample.kind in _MODEL_KINDS and sample.category != "data":
            anchored = True
        recorder.add(step, 0, anchored, sample, interval_s)
        counts[step] = counts.get(step, 0) + 1
    recorder.close()
    durations = [(k, counts.get(k, 0) * interval_s) for k in range(WARMUP, len(sampled.starts))]
    return Measurements(
        wall_s=wall_s,
        setup_s=0.0,
        step_source=sampled.source,
        warmup=WARMUP,
        steady_steps=len(durations),
        durations=durations,
        warmup_durations=[counts.get(0, 0) * interval_s] if sampled.starts else [],
        cpu_durations=[],
        steady=recorder.steady,
        warm=recorder.warm,
        setup=recorder.setup,
        per_step=recorder.per_step.items(),
        ops_by_function={},
        census_steps=0,
        device=device,
        sampler_interval_s=interval_s,
        samples=len(sampled.classified),
        sampler_busy_s=0.0,
        loop=sampled.loop.where if sampled.loop is not None else None,
        outside=description,
    )


def steps_timed(m: Measurements) -> bool:
    """Whether the steps found held enough samples each for their times to mean anything."""
    return samples_per_step(m) >= MIN_SAMPLES_PER_STEP


def samples_per_step(m: Measurements) -> float:
    """The median number of samples a counted step held."""
    if not m.durations or not m.sampler_interval_s:
        return 0.0
    return statistics.median(d for _, d in m.durations) / m.sampler_interval_s


def _loop_starts(frames: list[ForeignFrame | None], loop: Loop) -> list[int]:
    """Samples where a new iteration of ``loop`` had begun since the one before."""
    starts: list[int] = []
    last: int | None = None
    for i, frame in enumerate(frames):
        line = _loop_line(frame, loop)
        if line is None:
            continue
        position = body_position(loop, line)
        if last is not None and position < last:
            starts.append(i)
        last = position
    return starts


def _loop_line(frame: ForeignFrame | None, loop: Loop) -> int | None:
    while frame is not None:
        if frame.f_code == loop.code:
            return frame.f_lineno
        frame = frame.f_back
    return None


def _optimizer_starts(classified: list[Classified]) -> list[int]:
    """Samples right after a run of samples inside the optimizer's step."""
    starts = []
    previous = None
    for i, sample in enumerate(classified):
        kind = sample.kind if sample.kind != PROBE else previous
        if previous == "optimizer" and kind != "optimizer":
            starts.append(i)
        previous = kind
    return starts
