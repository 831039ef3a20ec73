"""trainmedic.preflight.console: the verdicts and details the full-report test leaves out, exactly.

tests/preflight/test_preflight_render.py pins one report of every kind of result; these pin the
rarer branches one result at a time.
"""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from trainmedic.preflight.console import render_preflight
from trainmedic.preflight.frames import Frame, Where
from trainmedic.preflight.model import ConfigIssue, ExperimentResult, PlanCheck, PreflightReport, ResumeCheck

ROOT = Path("/proj")
MiB, GiB = 2**20, 2**30


def render(*results: ExperimentResult, root: Path = ROOT, width: int = 100, styles: bool = False) -> str:
    console = Console(
        file=io.StringIO(),
        width=width,
        record=True,
        force_terminal=styles,
        color_system="standard" if styles else None,
    )
    render_preflight(PreflightReport(root, root / "pyproject.toml", "t4", None, True, list(results)), console)
    return "\n".join(line.rstrip() for line in console.export_text(styles=styles).splitlines()) + "\n"


def result(name: str = "toy", status: str = "passed", **fields) -> ExperimentResult:
    return ExperimentResult(name, "python train.py", 120.0, status, 0.5, **fields)


def test_a_crash_with_no_line_of_the_users_shows_the_last_lines_of_stderr():
    stderr = "".join(f"line {i}\n" for i in range(1, 9))
    crashed = result(status="failed", exit_code=-9, error="killed by SIGKILL", stderr=stderr)
    assert render(crashed) == (
        "Preflight: 1 experiment from pyproject.toml, run tiny on the CPU\n"
        "project: /proj\n"
        "\n"
        "experiment  verdict    time  detail\n"
        "toy         FAILED   0.50 s  killed by SIGKILL\n"
        "\n"
        "toy: FAILED with exit code -9 after 0.50 s\n"
        "  killed by SIGKILL\n"
        "  last lines of stderr:\n"
        "    line 4\n"
        "    line 5\n"
        "    line 6\n"
        "    line 7\n"
        "    line 8\n"
        "\n"
        "1 of 1 experiment needs attention: 1 failed.\n"
    )


def test_a_failure_with_nothing_to_say_still_names_itself():
    text = render(result(status="failed"))
    assert "toy         FAILED   0.50 s  failed\n" in text
    assert "toy: FAILED with no exit code after 0.50 s\n" in text


def test_each_resume_state_has_its_short_form_and_its_colour():
    results = [
        result("a", resume=ResumeCheck("not_restored", "the resumed run started over from step 0")),
        result(
            "b",
            resume=ResumeCheck(
                "resume_failed",
                "the resumed run failed: KeyError: 'optimizer'",
                where=Where(Frame("/proj/train.py", 12, "main", "ck.restore(model, opt)")),
            ),
        ),
        result("c", resume=ResumeCheck("inconclusive", "no save happened before the run ended")),
    ]
    text = render(*results)
    assert "a           RESUME FAILED  0.50 s  did not resume\n" in text
    assert "b           RESUME FAILED  0.50 s  resumed run failed\n" in text
    assert "c           passed         0.50 s  resume not checked\n" in text
    # A resumed run that failed points at the user's line, under the resume check.
    assert (
        "b: RESUME FAILED after 0.50 s\n"
        "  resume check: the resumed run failed: KeyError: 'optimizer'\n"
        "    at train.py:12 in main\n"
        "      12 | ck.restore(model, opt)\n"
    ) in text
    assert text.endswith("2 of 3 experiments need attention: 2 resume failed.\n")
    ansi = render(*results, styles=True)
    assert "  \x1b[31mresume check: the resumed run failed" in ansi  # failed: red
    assert "  \x1b[33mresume check: no save happened" in ansi  # could not be judged: yellow


def test_why_a_check_did_not_run_is_a_dim_note():
    quiet = result(
        config_note="no config file was read", resume_note="the script does not use checkpoint.Checkpointer"
    )
    text = render(quiet)
    assert text.endswith(
        "toy: passed after 0.50 s\n"
        "  note: no config file was read\n"
        "  note: the script does not use checkpoint.Checkpointer\n"
        "\n"
        "The experiment passed.\n"
    )


def test_a_config_key_never_read_is_dim_and_a_missed_override_yellow():
    issues = [
        ConfigIssue("never_read", "config.yaml", "lr_decay", 7, "lr_decay is set but never read"),
        ConfigIssue("missed_override", "config.yaml", "epochs", None, "epochs = 100 was not changed"),
    ]
    ansi = render(result(configs=issues), styles=True)
    assert "  \x1b[2mconfig.yaml:7: lr_decay is set but never read" in ansi
    assert "  \x1b[33mconfig.yaml: epochs = 100 was not changed" in ansi  # no line: the file alone


def test_a_plan_that_does_not_fit_is_a_verdict_and_a_lower_bound_says_so():
    big = result("big", plan=PlanCheck("m.py:build", "t4", 64, "bf16", False, 15 * GiB, 16 * GiB, 15 * GiB))
    floor = result(
        "floor", plan=PlanCheck("m.py:build", "t4", 8, "fp32", True, MiB, 400 * MiB, 15 * GiB, exact=False)
    )
    text = render(big, floor, width=200)
    assert "big         DOES NOT FIT  0.50 s  does not fit on t4\n" in text
    assert (
        "  plan on t4, batch 8, fp32: needs 400.0 MiB of 15.0 GiB: fits "
        "(a lower bound: part of the step could not be traced)\n"
    ) in text
    assert text.endswith("1 of 2 experiments needs attention: 1 does not fit.\n")


def test_a_long_project_path_is_printed_whole_not_cropped():
    root = Path("/" + "/".join(["a-rather-long-folder-name"] * 6))
    text = render(result(), root=root, width=60)
    assert f"\nproject: {root}\n" in text
    assert len(str(root)) > 60
