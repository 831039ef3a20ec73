"""``trainmedic tune`` as a user runs it: a real process, real files, real Ctrl+C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from warm_kit import popen_trainmedic, run_trainmedic

BUILDS = Path(__file__).resolve().parents[1] / "tune" / "tune_builds.py"

#: Batches 1 and 2 are measured; a real step at batch 4 says so in a file and then waits for the
#: test's Ctrl+C (no trial count long enough to be still measuring when the signal comes).
INTERRUPTIBLE = """
import pathlib, threading, torch
from torch._subclasses.fake_tensor import FakeTensor

class Net(torch.nn.Linear):
    def forward(self, x):
        if x.shape[0] >= 4 and not isinstance(torch.empty(1), FakeTensor):
            pathlib.Path(__file__).with_name("measuring").touch()  # a real step: the measurement is on
            threading.Event().wait()  # until Ctrl+C
        return super().forward(x)

def build(batch_size):
    return dict(model=Net(16, 16), inputs=torch.randn(batch_size, 16))
"""


def tune(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_trainmedic(["tune", *args], cwd=cwd, timeout=300, env=env or _env(cwd))


def _env(folder: Path) -> dict:
    return {**os.environ, "XDG_CACHE_HOME": str(folder / "cache"), "COLUMNS": "120"}


@pytest.mark.slow
def test_tune_measures_prints_the_table_and_writes_json_and_html(tmp_path):
    done = tune(
        f"{BUILDS}:mlp",
        "--device",
        "cpu",
        "--batch",
        "2,8",
        "--precision",
        "fp32",
        "--compile",
        "off",
        "--trials",
        "3",
        "--json",
        "t.json",
        "--html",
        "t.html",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "samples/s" in done.stdout and "change:" in done.stdout
    assert done.stdout.count("batch 2 · fp32") >= 1 and "batch 8 · fp32" in done.stdout
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["schema"] == "trainmedic.tune/1" and len(data["rows"]) == 2
    assert data["rows"][0]["roofline"]["bound"] in ("compute", "bandwidth")
    assert (tmp_path / "t.html").read_text().lstrip().lower().startswith("<!doctype html>")
    assert "JSON result written to t.json" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere.py:build"], "nowhere.py does not exist"),
        ([f"{BUILDS}:no_batch_axis", "--device", "cpu"], "no axis grows with the batch size"),
        ([f"{BUILDS}:broken", "--device", "cpu"], "broken(1) raised ValueError: the data folder is missing"),
        ([f"{BUILDS}:mlp", "--batch", "2,x"], "--batch 2,x: 'x' is not a whole number >= 1"),
        ([f"{BUILDS}:mlp", "--precision", "fp8"], "precision 'fp8' is not one of fp32, tf32, bf16, fp16"),
        ([f"{BUILDS}:mlp", "--budget", "soon"], "--budget soon: cannot read 'soon' as a duration"),
        ([f"{BUILDS}:mlp", "--set", "lr=1,2"], "--set overrides a script's options; use it with --script"),
        (
            [f"{BUILDS}:mlp", "--device", "tpu"],
            "device 'tpu' is not a device; expected auto, cpu, cuda or cuda:N",
        ),
        ([], "give a build function to tune"),
        (
            ["--script", "train.py", "--batch", "2,4"],
            "--batch tune a build function; a script is tuned over its own options",
        ),
        ([f"{BUILDS}:mlp", "--steps", "50"], "--steps sets how many steps each run of a --script measures"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_code_2(tmp_path, args, message):
    done = tune(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("trainmedic tune: error: ")
    assert message in lines[0]
    assert "Traceback" not in done.stderr


def test_an_option_the_script_does_not_have_is_named_with_the_close_one(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--batch-size', type=int)\np.parse_args()\n"
    )
    done = tune("--script", "train.py", "--set", "bach_size=2,4", cwd=tmp_path)
    assert done.returncode == 2
    assert "train.py has no option --bach_size" in done.stderr and "did you mean --batch-size?" in done.stderr


@pytest.mark.slow
def test_ctrl_c_prints_what_was_measured_and_exits_130(tmp_path):
    (tmp_path / "model.py").write_text(INTERRUPTIBLE)
    child = popen_trainmedic(
        [
            "tune",
            "model.py:build",
            "--device",
            "cpu",
            "--batch",
            "1,2,4,8,16",
            "--precision",
            "fp32",
            "--compile",
            "off",
            "--trials",
            "3",
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    marker = tmp_path / "measuring"
    deadline = time.monotonic() + 240
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the file the build writes, not a guess at timing
    assert marker.exists(), child.communicate()[1]
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "stopped by Ctrl+C after 2 measured configurations" in out
    assert "batch 1 · fp32" in out and "batch 2 · fp32" in out


@pytest.mark.slow
def test_a_budget_holds_for_the_whole_command_even_when_one_configuration_takes_longer(tmp_path):
    # Each step of slow_step at batch 512 takes seconds here; measuring it (first step, warm-up,
    # 3 trials) takes far longer than the budget. It used to be measured to the end whatever
    # the budget (and the budget's clock started after importing torch and loading the build).
    budget_s = 8.0
    started = time.monotonic()
    done = tune(
        f"{BUILDS}:slow_step",
        "--device",
        "cpu",
        "--batch",
        "512",
        "--precision",
        "fp32",
        "--compile",
        "off",
        "--trials",
        "3",
        "--budget",
        f"{budget_s:g}s",
        "--json",
        "t.json",
        cwd=tmp_path,
    )
    wall = time.monotonic() - started
    assert done.returncode == 1, done.stderr  # nothing measured in time: no answer to read
    assert "no configuration was measured (the budget of 8.00 s ran out" in done.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["stopped_early"].startswith("the budget of 8.00 s ran out")
    # What may pass the budget: the torch op in flight at the deadline, rendering, exiting.
    assert wall < budget_s + 5, f"{wall:.1f} s for a budget of {budget_s:g} s"


@pytest.mark.slow
def test_when_every_configuration_fails_the_exit_code_is_1_and_the_failures_are_shown(tmp_path):
    done = tune(
        f"{BUILDS}:nan_after_first",
        "--device",
        "cpu",
        "--batch",
        "2,4",
        "--precision",
        "fp32",
        "--compile",
        "off",
        "--trials",
        "3",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No configuration was measured" in done.stdout
    assert done.stdout.count("batch 2 is not supported by this layer") == 1
    assert "batch 4 is not supported by this layer" in done.stdout


@pytest.mark.slow
def test_a_build_written_for_the_gpu_is_tuned_on_the_cpu_as_plan_takes_it(tmp_path):
    done = tune(
        f"{BUILDS}:gpu_written",
        "--device",
        "cpu",
        "--batch",
        "4",
        "--precision",
        "fp32",
        "--compile",
        "off",
        "--trials",
        "3",
        "--json",
        "t.json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["measured"], rows
    assert "those tensors were put on the CPU" in " ".join(done.stdout.split())
