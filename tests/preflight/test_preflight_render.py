"""The rendered report, as exact text at a fixed width (rich tables wrap at the console's width)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from trainmedic.preflight.console import render_preflight
from trainmedic.preflight.frames import Frame, LoopProgress, Where
from trainmedic.preflight.model import (
    ConfigIssue,
    ExperimentResult,
    PlanCheck,
    PreflightReport,
    ResumeCheck,
    SessionEstimate,
)

ROOT = Path("/proj")


def render(report: PreflightReport) -> str:
    console = Console(file=io.StringIO(), width=120, record=True, force_terminal=False)
    render_preflight(report, console)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


T4 = 15_843_721_216
MiB, GiB = 2**20, 2**30


def report() -> PreflightReport:
    toy = ExperimentResult(
        "toy2d",
        "python train.py --dataset 2d",
        120.0,
        "passed",
        1.234,
        0,
        uses_checkpointer=True,
        resume=ResumeCheck(
            "identical",
            "resume identical from step 3 (killed after the save of step 3; 2 later saves compared)",
            3,
            3,
            [4, 5],
        ),
        plan=PlanCheck("model.py:build", "t4", 256, "fp32", True, 300 * MiB, 700 * MiB, T4),
        session=SessionEstimate(
            40000,
            0.62,
            "target",
            24800.0,
            32400.0,
            True,
            1,
            None,
            "full run: 40000 steps x 620.0 ms per step (step_time, measured on the target) = 6h53m: fits a 9h session",
        ),
    )
    mnist = ExperimentResult(
        "mnist",
        "python train.py --dataset mnist",
        120.0,
        "failed",
        0.51,
        1,
        error="ValueError: Input samples 'x' and 'y' should be encoded as (N,D) or (B,N,D) (batch) tensors.",
        where=Where(Frame("/proj/nsgf/flow.py", 42, "compute_velocity", "F, G = loss_fn(x, y)")),
        plan=PlanCheck("model.py:build", "t4", 128, "fp32", False, 15 * GiB, 16 * GiB, T4),
        session=SessionEstimate(
            40000,
            0.9,
            "target",
            36000.0,
            32400.0,
            False,
            2,
            31500.0,
            "full run: 40000 steps x 900.0 ms per step (step_time, measured on the target) = 10h: needs 2 sessions of "
            "9h: pass deadline='8h45m' to checkpoint.Checkpointer and resume in the next session",
        ),
    )
    cifar = ExperimentResult(
        "cifar",
        "python train.py --dataset cifar --train-iters 5",
        120.0,
        "stuck",
        120.0,
        where=Where(
            Frame("/proj/train.py", 88, "train_time_predictor", "loss = predictor.step(batch)"),
            86,
            'for it in range(cfg["time_predictor"]["num_iterations"]):',
            progress=LoopProgress(812, 40000, "it", 'range(cfg["time_predictor"]["num_iterations"])'),
        ),
        configs=[
            ConfigIssue(
                "missed_override",
                "config.yaml",
                "time_predictor.num_iterations",
                31,
                "time_predictor.num_iterations = 40000 was not changed, but nsgf_training.num_iterations and "
                "nsf_training.num_iterations were set to 5",
                ("nsgf_training.num_iterations", "nsf_training.num_iterations"),
            )
        ],
    )
    resume = ExperimentResult(
        "resume",
        "python ck.py",
        120.0,
        "passed",
        0.8,
        0,
        uses_checkpointer=True,
        resume=ResumeCheck(
            "diverged",
            "diverged at step 5 in object 'model': after resuming from step 4 the run no longer matches",
            4,
            4,
            [5, 6],
            5,
            ["model"],
            skipped=[("/tmp/x/checkpoints/r/000003-step-3", "sha256 mismatch in model.pt")],
        ),
    )
    unplanned = ExperimentResult(
        "vae",
        "python vae.py",
        120.0,
        "passed",
        0.3,
        0,
        plan=PlanCheck("vae.py:build", "", 64, "fp32", error="no target GPU to plan for: set device"),
        notes=["instrumentation: x"],
    )
    return PreflightReport(
        ROOT,
        ROOT / "pyproject.toml",
        "t4",
        32400.0,
        True,
        [toy, mnist, cifar, resume, unplanned],
        notes=["a report note"],
    )


EXPECTED = """\
Preflight: 5 experiments from pyproject.toml, run tiny on the CPU
project: /proj

experiment  verdict            time  detail
toy2d       passed           1.23 s  resume identical from step 3; fits on t4
mnist       FAILED           0.51 s  ValueError at nsgf/flow.py:42; does not fit on t4; needs 2 sessions
cifar       STUCK             2m00s  still running after 2m, in the loop at train.py:86 (iteration 812 of 40000), at
                                     train.py:88; override missed time_predictor.num_iterations
resume      RESUME DIVERGED  0.80 s  diverged at step 5 in object 'model'
vae         passed           0.30 s

toy2d: passed after 1.23 s
  resume check: resume identical from step 3 (killed after the save of step 3; 2 later saves compared)
  plan on t4, batch 256, fp32: needs 700.0 MiB of 14.8 GiB: fits
  session: full run: 40000 steps x 620.0 ms per step (step_time, measured on the target) = 6h53m: fits a 9h session

mnist: FAILED with exit code 1 after 0.51 s
  ValueError: Input samples 'x' and 'y' should be encoded as (N,D) or (B,N,D) (batch) tensors.
  at nsgf/flow.py:42 in compute_velocity
    42 | F, G = loss_fn(x, y)
  plan on t4, batch 128, fp32: needs 16.0 GiB of 14.8 GiB: does NOT fit (trainmedic plan model.py:build --device t4
  --max-batch finds the largest batch that fits)
  session: full run: 40000 steps x 900.0 ms per step (step_time, measured on the target) = 10h: needs 2 sessions of 9h:
  pass deadline='8h45m' to checkpoint.Checkpointer and resume in the next session

cifar: STUCK, still running after its 2m budget
  in the loop at train.py:86 in train_time_predictor, at iteration 812 of 40000
    86 | for it in range(cfg["time_predictor"]["num_iterations"]):
    88 | loss = predictor.step(batch)
  counted by it; total from range(cfg["time_predictor"]["num_iterations"])
  config.yaml:31: time_predictor.num_iterations = 40000 was not changed, but nsgf_training.num_iterations and
  nsf_training.num_iterations were set to 5

resume: RESUME DIVERGED after 0.80 s
  resume check: diverged at step 5 in object 'model': after resuming from step 4 the run no longer matches
    restore skipped /tmp/x/checkpoints/r/000003-step-3: sha256 mismatch in model.pt

vae: passed after 0.30 s
  plan of vae.py:build: not planned: no target GPU to plan for: set device
  note: instrumentation: x

note: a report note

3 of 5 experiments need attention: 1 failed, 1 stuck, 1 resume diverged.
"""


def test_every_kind_of_result_at_width_120():
    assert render(report()) == EXPECTED


def test_one_passing_command():
    result = ExperimentResult("python t.py", "python t.py", 120.0, "passed", 0.25, 0)
    text = render(PreflightReport(ROOT, None, None, None, True, [result]))
    assert text == (
        "Preflight: 1 experiment from the command line, run tiny on the CPU\n"
        "project: /proj\n"
        "\n"
        "experiment   verdict    time  detail\n"
        "python t.py  passed   0.25 s\n"
        "\n"
        "The experiment passed.\n"
    )


def test_the_header_counts_declared_and_command_line_experiments_apart():
    declared = ExperimentResult("toy", "python t.py", 120.0, "passed", 0.25, 0)
    given = ExperimentResult("python u.py", "python u.py", 120.0, "passed", 0.25, 0, from_command_line=True)
    both = render(PreflightReport(ROOT, ROOT / "pyproject.toml", None, None, True, [declared, given]))
    assert both.splitlines()[0] == (
        "Preflight: 2 experiments, 1 from pyproject.toml and 1 from the command line, run tiny on the CPU"
    )
    alone = render(PreflightReport(ROOT, None, None, None, True, [given]))
    assert alone.splitlines()[0] == "Preflight: 1 experiment from the command line, run tiny on the CPU"
