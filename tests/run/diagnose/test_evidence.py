"""No verdict without evidence: what a report says when the run gave no steps to measure."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from trainmedic.run.diagnose import diagnose
from trainmedic.run.probe.recorder import BEFORE_MODEL, Aggregate
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.report.console import build
from trainmedic.run.report.html import render_html
from trainmedic.run.report.model import Report

IMPORTS = {("host_other", "import", "train.py:1", "train.py:1:<module>"): 1.6}


def no_steps(measure, lines, **changes):
    """A run that never marked a step: everything it sampled is set-up time."""
    m = measure({}, [])
    setup = Aggregate()
    for key, seconds in lines.items():
        setup.add(key, seconds, samples=int(seconds / 0.01))
    return dataclasses.replace(
        m,
        step_source=None,
        warmup=3,
        steady_steps=0,
        durations=[],
        warmup_durations=[],
        cpu_durations=[],
        setup=setup,
        setup_s=m.wall_s,
        **changes,
    )


def rendered(report: Report) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(build(report))
    return console.export_text()


def test_a_script_that_fails_before_its_first_step_gets_no_bottleneck_and_says_where_it_failed(measure):
    failed = RunOutcome(1, "exception", "ValueError: lr must be positive (at train.py:2)", "Traceback ...")
    report = diagnose(no_steps(measure, IMPORTS), ["train.py"], failed)
    assert (report.evidence, report.bottleneck, report.findings) == ("none", None, [])
    assert report.steps.count == 0
    assert "failed before its first step (ValueError: lr must be positive (at train.py:2))" in report.notes[0]
    text = rendered(report)
    assert "before its first step" in text and "◀ bottleneck" not in text
    assert "Where" not in text.split("Your lines")[0]  # no category bars for a run that never stepped
    assert Report.from_dict(report.to_dict()).evidence == "none"
    page = render_html(report)
    assert "Bottleneck: none named" in page and "ended before its first step" in page


def test_a_script_whose_argument_parsing_exits_is_no_verdict_either(measure):
    exited = RunOutcome(2, "exit", "the script called sys.exit(2) (at train.py:9)")
    report = diagnose(no_steps(measure, IMPORTS), ["train.py", "--bad"], exited)
    assert (report.evidence, report.bottleneck) == ("none", None)
    assert "exited before its first step" in report.notes[0]


def test_a_completed_run_with_no_steps_and_no_loop_shows_whole_run_time_as_whole_run_time(measure, completed):
    lines = {**IMPORTS, (BEFORE_MODEL, "", "gen.py:7", "gen.py:1:<module>"): 30.0}
    m = no_steps(
        measure,
        lines,
        loop_problem="another tracer (a debugger or coverage) is active, so the loop could not be timed",
        max_steps=9,
    )
    report = diagnose(m, ["gen.py"], completed)
    assert (report.evidence, report.bottleneck, report.findings) == ("whole run", None, [])
    assert report.lines[0].where == "gen.py:7" and report.lines[0].seconds_per_step == pytest.approx(30.0)
    assert "another tracer" in report.notes[0] and "not per step" in report.notes[0]
    assert "--steps 9 could not stop the run" in report.notes[1]
    text = rendered(report)
    tables = text.split("Notes")[0]
    assert "Where the whole run's time went" in tables and "whole run" in tables and "per step" not in tables
    assert "median" not in text and "0 steady-state" not in text


def loop_run(measure, lines, ops):
    m = measure(lines, [0.0004] * 200, ops_by_function=ops, census_steps=2)
    return dataclasses.replace(m, step_source="loop", loop="gen.py:20")


def test_a_per_sample_loop_without_a_model_is_tiny_ops_at_its_hot_line_per_iteration(measure, completed):
    # Seed 001's generator with no step of its own: 38 calls an iteration at ~10 µs each.
    function = "gen.py:8:generate_iq_sample"
    lines = {
        (BEFORE_MODEL, "", "gen.py:13", function): 0.03,
        (BEFORE_MODEL, "", "gen.py:11", function): 0.02,
        (BEFORE_MODEL, "", "gen.py:21", "gen.py:1:<module>"): 0.001,
    }
    report = diagnose(loop_run(measure, lines, {function: 76}), ["gen.py"], completed)
    assert (report.evidence, report.bottleneck) == ("loop", "tiny_ops")
    top = report.findings[0]
    assert (top.category, top.where) == ("tiny_ops", "gen.py:13")
    assert "38 tiny tensor ops per iteration" in top.title
    assert "mean iteration" in top.evidence and "step" not in top.evidence
    assert "the loop at gen.py:20 counts as one step" in report.notes[0]
    assert report.steps.loop == "gen.py:20"
    assert "200 iterations of the loop at gen.py:20" in rendered(report)


def test_a_loop_with_a_backward_in_it_is_a_training_step_not_a_per_sample_loop(measure, completed):
    # A hand-written SGD update (no optimizer.step()): 12 calls an iteration are a step's, not tiny ops.
    lines = {
        ("compute", "backward", "sgd.py:6", "sgd.py:1:<module>"): 0.04,
        (BEFORE_MODEL, "", "sgd.py:5", "sgd.py:1:<module>"): 0.04,
    }
    report = diagnose(loop_run(measure, lines, {"sgd.py:1:<module>": 24}), ["sgd.py"], completed)
    assert report.evidence == "loop"
    assert "tiny_ops" not in {f.category for f in report.findings}


def test_steps_too_short_to_sample_inside_keep_their_count_and_name_no_bottleneck(measure, completed):
    # `--steps 6` on a loop of 0.1 ms iterations: six boundaries, not one sample inside them.
    m = dataclasses.replace(
        no_steps(measure, IMPORTS),
        step_source="loop",
        loop="gen.py:20",
        steady_steps=6,
        durations=[(3 + i, 0.0001) for i in range(6)],
        warmup_durations=[0.0001] * 3,
    )
    report = diagnose(
        m, ["gen.py"], RunOutcome(0, "step_limit", "stopped after 6 steady-state steps (--steps)")
    )
    assert (report.evidence, report.bottleneck, report.steps.count, report.steps.loop) == (
        "whole run",
        None,
        6,
        "gen.py:20",
    )
    assert "too few and too short for the stack sampler" in report.notes[0]
    assert not any("could not stop the run" in note for note in report.notes)
    assert "9 counted, too short to see inside" in rendered(report)
