"""`trainmedic run` on scripts that give thin evidence: no step of their own, or no loop at all."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from warm_kit import run_trainmedic

GENERATOR = """
import torch

torch.set_num_threads(1)


def one_sample():
    x = torch.randn(32)
    for _ in range(4):
        x = x * 0.5 + torch.randn(32)
    return x.sum()


done = 0
for i in range(1_000_000):  # far longer than any test: only --steps can end it in time
    one_sample()
    done += 1
"""

NO_LOOP = """
import torch

torch.set_num_threads(1)
a = torch.randn(700, 700)
u, s, v = torch.linalg.svd(a @ a.T + torch.eye(700))
q, r = torch.linalg.qr(a)
print(float(s[0]), float(r[0, 0]))
"""


BAD_ARGUMENTS = """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
"""


def run(tmp_path, source, *options, exit_code=0, fresh=False):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    out = tmp_path / "report.json"
    result = run_trainmedic(
        ["run", "--quiet", "--json", str(out), *options, script.name],
        cwd=tmp_path,
        timeout=240,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        fresh=fresh,
    )
    assert result.returncode == exit_code, result.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_steps_stops_a_run_without_steps_after_n_iterations_of_its_loop(tmp_path):
    # The inner range(4) loop holds about 85 % of the samples, near the finder's 80 % line, so
    # either loop may be the one counted (run/probe/loops.py judges each on the samples since it
    # began, not on the `import torch` before it); either way --steps ends the run after 10000 of
    # its iterations.
    report = run(tmp_path, GENERATOR, "--steps", "10000", fresh=True)
    assert report["outcome"] == "step_limit"
    assert report["evidence"] == "loop"
    assert report["steps"]["count"] == 10000
    assert report["steps"]["loop"] in ("job.py:9", "job.py:15")
    assert report["bottleneck"] is not None


def test_a_run_with_no_step_and_no_loop_names_no_bottleneck_and_shows_whole_run_time(tmp_path):
    report = run(tmp_path, NO_LOOP, "--steps", "3")
    assert (report["evidence"], report["bottleneck"], report["findings"]) == ("whole run", None, [])
    assert report["steps"]["count"] == 0
    assert any("no loop held most of the run's time" in note for note in report["notes"])
    assert any("--steps 3 could not stop the run" in note for note in report["notes"])
    assert sum(line["seconds_per_step"] for line in report["lines"]) <= report["wall_s"]


@pytest.mark.slow
def test_a_script_whose_own_argument_parsing_fails_gets_its_line_and_no_verdict(tmp_path):
    # A fresh interpreter: the line asserted below is the script's own `import torch`.
    report = run(tmp_path, BAD_ARGUMENTS, exit_code=2, fresh=True)
    assert (report["outcome"], report["evidence"], report["bottleneck"], report["findings"]) == (
        "exit",
        "none",
        None,
        [],
    )
    assert report["message"] == "the script called sys.exit(2) (at job.py:6)"
    at_import = [line for line in report["lines"] if line["where"] == "job.py:3"]  # import torch
    assert at_import and all(
        (line["category"], line["kind"]) == ("host_other", "import") for line in at_import
    )
