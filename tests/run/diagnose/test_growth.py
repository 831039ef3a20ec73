"""A step that gets slower: the code's growth, or a machine that slowed under all of it."""

import pytest

from trainmedic.categories import CATEGORIES
from trainmedic.run.diagnose import diagnose, growth, steps
from trainmedic.run.probe.recorder import BEFORE_MODEL, SLOTS
from trainmedic.run.report.model import TimelinePoint

STEPS = 32


def transform_then_model(before: list[float], model: list[float]) -> tuple[dict, list]:
    """Sampled lines and per-step slots of a transform (aug.py:20) before the model (aug.py:50)."""
    per_step = []
    for i, (b, c) in enumerate(zip(before, model), start=3):
        slots = [0.0] * len(SLOTS)
        slots[SLOTS.index(BEFORE_MODEL)] = b
        slots[SLOTS.index("compute")] = c
        per_step.append((i, slots))
    lines = {
        (BEFORE_MODEL, "", "aug.py:20", "aug.py:12:__getitem__"): sum(before),
        ("compute", "forward", "aug.py:50", "aug.py:44:forward"): sum(model),
    }
    return lines, per_step


#: Step times (ms) of tests/scenarios/data_transform.py's constant-work transform on a shared
#: 2-vCPU VM whose host got busy at step 12: wall and CPU time per step both rose 1.6x.
SLOWED_HOST_MS = [
    int(ms)
    for ms in """
    87 91 90 91 90 91 95 93 122 85 87 99 140 149
    150 150 146 141 152 150 137 128 139 148 152 153 147 152
""".split()
]


def timed(m, model: list[float]):
    """``m`` with the hooks' exact model part of every step (wall and CPU alike)."""
    m.model_durations = [(i, (s, s)) for i, s in enumerate(model, start=3)]
    return m


@pytest.mark.parametrize("exact", [True, False], ids=["hooks", "sampled"])
def test_a_machine_that_slows_mid_run_is_not_called_a_growing_step(completed, measure, exact):
    wall = [ms / 1000 for ms in SLOWED_HOST_MS]
    before, model = [0.87 * w for w in wall], [0.13 * w for w in wall]
    lines, per_step = transform_then_model(before, model)
    m = measure(lines, wall, per_step=per_step)
    report = diagnose(timed(m, model) if exact else m, ["aug.py"], completed)
    assert steps.trend(wall, wall) is not None  # the clocks alone would call it a trend
    assert report.findings[0].category == "data"
    assert not any("grew" in f.evidence for f in report.findings)
    assert report.findings[0].kind != "pool"
    note = next(n for n in report.notes if "every part of the step slowed alike" in n)
    assert ("the model's forward to optimizer step" in note) == exact


@pytest.mark.parametrize("exact", [True, False], ids=["hooks", "sampled"])
def test_a_machine_that_slows_one_part_more_than_the_other_is_not_growth(completed, measure, exact):
    # The host of SLOWED_HOST_MS, slowing the batch's per-sample loop of tiny calls 1.45x and the
    # model beside it 1.15x: twice the model's growth, but no more than a neighbour gives.
    slowdown = [ms / SLOWED_HOST_MS[0] for ms in SLOWED_HOST_MS]
    before = [0.0757 * (1 + 0.75 * (s - 1)) for s in slowdown]
    model = [0.0113 * (1 + 0.25 * (s - 1)) for s in slowdown]
    wall = [b + c for b, c in zip(before, model)]
    lines, per_step = transform_then_model(before, model)
    m = measure(lines, wall, per_step=per_step)
    report = diagnose(timed(m, model) if exact else m, ["aug.py"], completed)
    assert steps.trend(wall, wall) is not None
    assert not any("grew" in f.evidence for f in report.findings)
    assert any("a machine that slows one part more than another" in n for n in report.notes)


@pytest.mark.parametrize("exact", [True, False], ids=["hooks", "sampled"])
def test_a_transform_that_does_more_each_step_beside_a_steady_model_is_growth(completed, measure, exact):
    before = [0.04 + 0.002 * i for i in range(STEPS)]
    model = [0.012] * STEPS
    wall = [b + c for b, c in zip(before, model)]
    lines, per_step = transform_then_model(before, model)
    m = measure(lines, wall, per_step=per_step)
    report = diagnose(timed(m, model) if exact else m, ["aug.py"], completed)
    top = report.findings[0]
    assert (top.category, top.kind, top.where) == ("data", "pool", "aug.py:20")
    assert "step time grew" in top.evidence
    assert not any("slowed" in n for n in report.notes)


def test_a_part_that_outgrew_the_rest_on_the_wall_clock_alone_is_not_growth(completed, measure):
    # What a full test run saw of tests/scenarios/data_transform.py beside a busy neighbour: the
    # step's wall time grew 2.0x, its CPU time 1.24x. On the wall clock the transform (2.1x)
    # outgrew the model (1.3x); on the process's own CPU time they rose alike (1.3x, 1.25x): no
    # more work per step.
    ramp = [i / (STEPS - 1) for i in range(STEPS)]
    before_wall = [0.087 * (1 + 1.1 * r) for r in ramp]
    model_wall = [0.013 * (1 + 0.3 * r) for r in ramp]
    before_cpu = [0.087 * (1 + 0.3 * r) for r in ramp]
    model_cpu = [0.013 * (1 + 0.25 * r) for r in ramp]
    wall = [b + c for b, c in zip(before_wall, model_wall)]
    cpu = [b + c for b, c in zip(before_cpu, model_cpu)]
    lines, per_step = transform_then_model(before_wall, model_wall)
    m = measure(lines, wall, per_step=per_step, cpu_durations=cpu)
    m.model_durations = [(i, (w, c)) for i, (w, c) in enumerate(zip(model_wall, model_cpu), start=3)]
    report = diagnose(m, ["aug.py"], completed)
    assert steps.trend(wall, cpu).measure == "step time"
    assert report.findings[0].category == "data" and report.findings[0].kind != "pool"
    assert not any("grew" in f.evidence for f in report.findings)
    note = next(n for n in report.notes if "on the process's own CPU time" in n)
    assert "the batch's preparation did not outgrow it" in note
    # The same wall clock with CPU time that rose with it: the code did more each step.
    m = measure(lines, wall, per_step=per_step, cpu_durations=wall)
    m.model_durations = [(i, (w, w)) for i, w in enumerate(model_wall, start=3)]
    assert "step time grew" in diagnose(m, ["aug.py"], completed).findings[0].evidence


def test_sampled_growth_of_a_part_too_small_to_measure_is_not_growth(completed, measure):
    # tests/scenarios/pool_growth.py's model is 4 % of its step: a few samples a quarter, whose
    # count can triple by chance. Timed by the hooks, the same model part is steady.
    before = [0.05 + 0.0015 * i for i in range(STEPS)]
    model = [0.003] * STEPS
    wall = [b + c for b, c in zip(before, model)]
    noisy = [0.001 if i < STEPS // 4 else 0.006 for i in range(STEPS)]  # what the sampler saw
    lines, per_step = transform_then_model([w - n for w, n in zip(wall, noisy)], noisy)
    m = measure(lines, wall, per_step=per_step)
    assert not any("grew" in f.evidence for f in diagnose(m, ["aug.py"], completed).findings)
    assert "grew" in diagnose(timed(m, model), ["aug.py"], completed).findings[0].evidence


def test_a_step_that_is_nearly_all_one_part_says_it_cannot_tell(completed, measure):
    wall = [ms / 1000 for ms in SLOWED_HOST_MS]
    before, model = [0.99 * w for w in wall], [0.01 * w for w in wall]
    lines, per_step = transform_then_model(before, model)
    report = diagnose(measure(lines, wall, per_step=per_step), ["aug.py"], completed)
    assert not any("grew" in f.evidence for f in report.findings)
    assert any("cannot be told from code that does more" in n for n in report.notes)


def point(step: int, seconds: float, split: dict[str, float]) -> TimelinePoint:
    return TimelinePoint(step, seconds, {c: split.get(c, 0.0) * seconds for c in CATEGORIES})


def test_categories_that_share_the_growing_slot_are_not_the_rest_of_the_step():
    # One slot (user code before the model) resolved 80 % into a pool and 20 % into its per-row
    # draw: both grow by construction; only the model's own slot says whether the machine slowed.
    mapping = {BEFORE_MODEL: {"data": 0.8, "tiny_ops": 0.2}, "compute": {"compute": 1.0}}
    timeline, per_step = [], {}
    for i in range(STEPS):
        before, model = 0.02 + 0.002 * i, 0.015
        total = before + model
        timeline.append(
            point(
                i,
                total,
                {"data": 0.8 * before / total, "tiny_ops": 0.2 * before / total, "compute": model / total},
            )
        )
        slots = [0.0] * len(SLOTS)
        slots[SLOTS.index(BEFORE_MODEL)], slots[SLOTS.index("compute")] = before, model
        per_step[i] = slots
    rising = steps.Trend(2.0, "step time")
    grown = growth.attribute(timeline, rising, {}, per_step, mapping)
    assert grown.category == "data"
    assert grown.rest == ("the rest of the step", 1.0)
    assert grown.note() is None
    # The same run with the model slowed alike: no category grew on its own.
    for p, slots in zip(timeline, per_step.values()):
        slots[SLOTS.index("compute")] = p.categories["data"] / 0.8 * 0.015 / 0.02
    assert growth.attribute(timeline, rising, {}, per_step, mapping).category is None
