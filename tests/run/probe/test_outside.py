"""Steps found in the order of stacks read from outside, and the report run's diagnosis makes of them.

The traces are written by hand, as py-spy would read them from the training scripts this test
writes: each sample is one stack, innermost frame first. The library frames point at the
installed torch's real files (found without importing torch), so run's classifier sees the same
module names a real job gives it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trainmedic.categories import COMPUTE, DATA
from trainmedic.run.diagnose import diagnose
from trainmedic.run.diagnose.resolve import BATCH_PREPARATION, OWN_CODE
from trainmedic.run.probe import outside
from trainmedic.run.probe.foreign import FrameBuilder
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.pyspy import PyFrame, ThreadTrace
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.report.model import DeviceInfo

TORCH = Path(importlib.util.find_spec("torch").origin).parent
FORWARD = PyFrame("forward", str(TORCH / "nn/modules/linear.py"), 125)
BACKWARD = PyFrame("backward", str(TORCH / "autograd/__init__.py"), 266)
OPTIMIZER = PyFrame("step", str(TORCH / "optim/sgd.py"), 110)
HDF5 = PyFrame("__getitem__", "/opt/venv/lib/python3.11/site-packages/h5py/_hl/dataset.py", 781)
#: A trainer's loop (Lightning's fit loop): a library that calls the user's code and the optimizer.
FIT_LOOP = PyFrame("run", "/opt/venv/lib/python3.11/site-packages/lightning/pytorch/loops/fit_loop.py", 205)

INTERVAL_S = 0.01

TRAIN = """\
import torch


def make_batch(step):
    return [step * i for i in range(4096)]


def main(model, opt, data):
    for step in range(1000):
        batch = data["x"][step]
        extra = make_batch(step)
        loss = model(batch).sum()
        loss.backward()
        opt.step()


def accumulate(model, opt, batches):
    for batch in batches:
        for micro in batch.split(4):
            part = micro * 2
            loss = model(part).sum()
        loss.backward()
        opt.step()


def training_step(model, batch):
    return model(batch).sum()


main(None, None, None)
"""


class Script:
    """The training script, and stacks at its lines as py-spy reads them."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "train.py"
        self.path.write_text(TRAIN, encoding="utf-8")
        self.lines = TRAIN.splitlines()
        self.module = PyFrame("<module>", str(self.path), self.line("main(None"))

    def line(self, start: str, function: str = "") -> int:
        """The first line that starts with ``start`` (indentation aside), in ``function`` if named."""
        first = (
            next(i for i, text in enumerate(self.lines) if text.startswith(f"def {function}("))
            if function
            else 0
        )
        found = (i + 1 for i, text in enumerate(self.lines) if i >= first and text.strip().startswith(start))
        return next(found)

    def at(self, function: str, start: str, *inner: PyFrame) -> tuple[PyFrame, ...]:
        """A stack at ``function``'s line starting with ``start``, library frames ``inner`` under it."""
        return (*inner, PyFrame(function, str(self.path), self.line(start, function)), self.module)


@pytest.fixture
def script(tmp_path) -> Script:
    return Script(tmp_path)


def _classify(script: Script, stacks: list[tuple[PyFrame, ...]]) -> outside.Sampled:
    trace = ThreadTrace(1, 1, "MainThread", list(stacks))
    classifier = FrameClassifier(cwd=str(script.path.parent))
    return outside.classify(trace, classifier, FrameBuilder())


def _report(script: Script, stacks: list[tuple[PyFrame, ...]]):
    sampled = _classify(script, stacks)
    device = DeviceInfo("cpu", "test CPU")
    m = outside.measurements(sampled, INTERVAL_S, len(stacks) * INTERVAL_S, device, "py-spy at 100 Hz")
    return m, diagnose(m, ["job.py"], RunOutcome(0, "attached"))


def _iteration(script: Script) -> list[tuple[PyFrame, ...]]:
    """One step of ``main``'s loop: six samples, from the loop's head to the optimizer."""
    return [
        script.at("main", "for step"),
        script.at("main", "batch =", HDF5),
        script.at("main", "extra =", PyFrame("make_batch", str(script.path), script.line("return [step"))),
        script.at("main", "loss =", FORWARD),
        script.at("main", "loss.backward", BACKWARD),
        script.at("main", "opt.step", OPTIMIZER),
    ]


def test_one_step_per_iteration_of_the_users_loop(script):
    sampled = _classify(script, _iteration(script) * 10)
    assert sampled.loop is not None and sampled.loop.where == f"train.py:{script.line('for step')}"
    assert sampled.source == outside.SAMPLED_LOOP
    # Iterations 2..10 start where the line goes back up the body; the first has nothing before it.
    assert sampled.starts == [6 * k for k in range(1, 10)]
    m, _ = _report(script, _iteration(script) * 10)
    # The one the window began in (warm-up) and the one it ended in are left out: 8 whole ones.
    assert m.steady_steps == 8
    assert [d for _, d in m.durations] == pytest.approx([6 * INTERVAL_S] * 8)


def test_a_step_whose_head_was_not_sampled_still_starts_where_the_body_wraps_around(script):
    # No sample on the `for` line (a next() shorter than a sampling interval): the body's
    # wrap-around from its last line to its first is the start.
    sampled = _classify(script, _iteration(script)[1:] * 10)
    assert sampled.source == outside.SAMPLED_LOOP
    assert sampled.starts == [5 * k for k in range(1, 10)]


@pytest.mark.parametrize("last", ["empty", "module"])
def test_a_last_sample_outside_the_loop_keeps_the_loop(script, last):
    stacks = _iteration(script) * 10
    stacks.append(() if last == "empty" else (script.module,))
    sampled = _classify(script, stacks)
    assert sampled.source == outside.SAMPLED_LOOP
    assert sampled.starts == [6 * k for k in range(1, 10)]


def test_a_nested_loops_wrap_around_is_not_a_new_step(script):
    def at(start: str, *inner: PyFrame) -> tuple[PyFrame, ...]:
        return script.at("accumulate", start, *inner)

    # Two micro-batches per step: the inner loop's body runs twice, wrapping around once.
    step = [
        at("for batch"),
        at("for micro"),
        at("part ="),
        at("loss =", FORWARD),
        at("for micro"),
        at("part ="),
        at("loss =", FORWARD),
        at("loss.backward", BACKWARD),
        at("opt.step", OPTIMIZER),
    ]
    sampled = _classify(script, step * 10)
    # The outer loop: the inner one holds under 80 % of the samples.
    assert sampled.loop is not None and sampled.loop.where == f"train.py:{script.line('for batch')}"
    assert sampled.source == outside.SAMPLED_LOOP
    assert sampled.starts == [9 * k for k in range(1, 10)]


def test_with_no_loop_of_the_users_steps_end_where_the_optimizer_does(script):
    # A trainer's loop calls the user's training_step, then backward and the optimizer itself:
    # the only loop on the stack is the library's.
    def callback(*inner: PyFrame) -> tuple[PyFrame, ...]:
        return (*inner, *script.at("training_step", "return model")[:-1], FIT_LOOP, script.module)

    def trainer(*inner: PyFrame) -> tuple[PyFrame, ...]:
        return (*inner, FIT_LOOP, script.module)

    step = [callback(FORWARD), callback(FORWARD), trainer(BACKWARD), trainer(BACKWARD), trainer(OPTIMIZER)]
    step.append(trainer(OPTIMIZER))
    sampled = _classify(script, step * 10)
    assert sampled.loop is None
    assert sampled.source == outside.SAMPLED_OPTIMIZER
    assert sampled.starts == [6 * k for k in range(1, 10)]


def test_a_job_sitting_on_one_line_has_no_steps(script):
    stacks = [
        script.at("main", "extra =", PyFrame("make_batch", str(script.path), script.line("return [step")))
    ] * 50
    sampled = _classify(script, stacks)
    assert (sampled.source, sampled.starts) == (None, [])
    m, report = _report(script, stacks)
    assert m.steady_steps == 0
    assert report.evidence == "whole run" and report.bottleneck is None


def test_a_data_heavy_trace_is_data_bound_on_sampled_evidence(script):
    def at(start: str, *inner: PyFrame) -> tuple[PyFrame, ...]:
        return script.at("main", start, *inner)

    # Six of ten samples of every step inside h5py, under the user's `batch = data["x"][step]`.
    step = [at("for step"), *[at("batch =", HDF5)] * 6, at("loss =", FORWARD)]
    step += [at("loss.backward", BACKWARD), at("opt.step", OPTIMIZER)]
    m, report = _report(script, step * 20)
    assert m.outside == "py-spy at 100 Hz" and m.step_source == outside.SAMPLED_LOOP
    assert report.evidence == "sampled"
    assert report.outcome == "attached"
    assert report.bottleneck == DATA
    top = max(report.findings, key=lambda f: f.share)
    assert (top.category, top.kind, top.where) == (DATA, "hdf5", f"train.py:{script.line('batch =')}")
    assert top.share == pytest.approx(0.6, abs=0.05)
    assert report.steps.count == 18 and report.steps.source == outside.SAMPLED_LOOP
    assert any(note.startswith("Read from outside (py-spy at 100 Hz)") for note in report.notes)


def test_plain_user_code_is_own_code_never_batch_preparation(script):
    # `trainmedic run` would call user code before the model's first call "batch preparation"
    # (its census saw what ran there); read from outside, nothing says what that code does.
    def at(start: str, *inner: PyFrame) -> tuple[PyFrame, ...]:
        return script.at("main", start, *inner)

    helper = PyFrame("make_batch", str(script.path), script.line("return [step"))
    step = [at("for step"), *[at("extra =", helper)] * 5, at("loss =", FORWARD)]
    step += [at("loss.backward", BACKWARD), at("opt.step", OPTIMIZER)]
    _, report = _report(script, step * 20)
    assert report.evidence == "sampled"
    own = [f for f in report.findings if f.kind == OWN_CODE]
    assert len(own) == 1 and own[0].where == f"train.py:{script.line('return [step')}"
    assert own[0].share == pytest.approx(6 / 9, abs=1e-3)  # the helper's five samples and the loop's head
    kinds = {f.kind for f in report.findings} | {line.kind for line in report.lines}
    assert BATCH_PREPARATION not in kinds
    assert {(line.where, line.kind) for line in report.lines if line.category != COMPUTE} == {
        (f"train.py:{script.line('return [step')}", OWN_CODE),
        (f"train.py:{script.line('for step')}", OWN_CODE),
    }


def test_advice_read_from_outside_names_attachs_own_options(script):
    # One h5py sample of six: close enough to the model's three for the close-call note.
    m, report = _report(script, _iteration(script) * 10)
    assert any(note.startswith("Too close to call") for note in report.notes)
    assert not any("--steps" in note for note in report.notes), report.notes
