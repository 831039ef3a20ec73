"""`trainmedic run` on torchrun ranks: 2 real CPU processes with gloo, one merged report."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from warm_kit import run_python, run_trainmedic

pytestmark = [pytest.mark.torchrun]

#: A DDP loop on 2 ranks; SLOW plants a straggler on rank 1 (its data or its compute), a failure
#: (an exception, a SIGKILL) at step 12, or a crash at exit. Line numbers are pinned by the tests below.
JOB = """
import os, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

SLOW = os.environ.get("SLOW", "")

class Samples(Dataset):
    def __len__(self):
        return 2048
    def __getitem__(self, i):
        if dist.get_rank() == 1 and SLOW == "data":
            time.sleep(0.002)  # rank 1 reads slower
        return torch.randn(128), torch.randn(1)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    def forward(self, x):
        if dist.get_rank() == 1 and SLOW == "compute":
            heavy, until = torch.randn(384, 384), time.perf_counter() + 0.03  # 30 ms more, on any CPU
            while time.perf_counter() < until:
                heavy = torch.tanh(heavy @ heavy)  # rank 1 computes more
        return self.body(x)

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(Samples(), batch_size=32)):
    if step == 30:
        break
    if dist.get_rank() == 1 and step == 12 and SLOW == "raise":
        raise RuntimeError("planted failure on rank 1")
    if dist.get_rank() == 1 and step == 12 and SLOW == "kill":
        os.kill(os.getpid(), 9)
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
if os.environ["RANK"] == "1" and os.environ.get("CRASH_AT_EXIT"): import atexit; atexit.register(os.abort)
"""


def _job(
    cwd: Path, slow: str, crash_at_exit: bool = False, steps: int | None = None
) -> tuple[subprocess.CompletedProcess, dict]:
    (cwd / "job.py").write_text(JOB.lstrip())
    env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1", "SLOW": slow}
    if crash_at_exit:
        env["CRASH_AT_EXIT"] = "1"
    result = run_trainmedic(
        [
            "run",
            "--nproc",
            "2",
            *(["--steps", str(steps)] if steps else []),
            "--json",
            "report.json",
            "job.py",
        ],
        cwd=cwd,
        env=env,
        timeout=180,
    )
    return result, json.loads((cwd / "report.json").read_text())


@pytest.fixture(scope="module")
def data_straggler(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """Rank 1 reads slower, and crashes while exiting after its script completed. The crash comes
    after everything the straggler is measured from, so one job serves both tests."""
    return _job(tmp_path_factory.mktemp("data-straggler"), "data", crash_at_exit=True)


@pytest.fixture(scope="module")
def compute_straggler(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    return _job(tmp_path_factory.mktemp("compute-straggler"), "compute")


@pytest.mark.parametrize(("slow", "where"), [("data", "job.py:12"), ("compute", "job.py:23")])
def test_a_planted_slow_rank_is_named_the_straggler_with_its_cause_and_line(request, slow, where):
    result, report = request.getfixturevalue(f"{slow}_straggler")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    fast, slow_rank = report["ranks"]
    assert fast["steps"] == slow_rank["steps"] > 0
    # The fast rank spends its extra time waiting for rank 1 in DDP's all-reduce.
    assert fast["wait_s"] > 5 * slow_rank["wait_s"]
    named = report["straggler"]
    assert named["rank"] == 1 and named["cause"] == slow and named["where"] == where
    assert "DDP gradient all-reduce" in named["text"]
    assert report["findings"][0]["kind"] == "straggler" and report["findings"][0]["where"] == where
    assert "rank 1 is the straggler" in result.stderr and "Ranks (per steady-state step)" in result.stderr
    # One report for the job: the ranks themselves stay quiet.
    assert result.stderr.count("trainmedic report") == 1


def test_a_diagnosis_only_job_on_ranks_keeps_its_estimates_and_says_why(tm):
    result, report = _job(tm.cwd, "data", steps=12)
    assert result.returncode == 0, result.stderr
    assert all(f.get("measured") is None for f in report["findings"])
    assert any(
        "torchrun job would all have to switch between the arms at the same step" in note
        for note in report["notes"]
    ), report["notes"]


def test_a_rank_that_raises_is_named_and_the_report_still_written(tm):
    result, report = _job(tm.cwd, "raise")
    assert result.returncode == 1
    assert report["outcome"] == "exception"
    # Rank 0 then fails on the closed connection; the cause named is rank 1's own error.
    assert report["message"].startswith(
        "rank 1 failed: RuntimeError: planted failure on rank 1 (at job.py:34)"
    )
    assert {r["rank"]: r["outcome"] for r in report["ranks"]}[1] == "exception"


def test_a_rank_killed_by_a_signal_is_named_as_dead(tm):
    result, report = _job(tm.cwd, "kill")
    assert result.returncode != 0
    rows = {r["rank"]: r for r in report["ranks"]}
    assert rows[1]["outcome"] == "died" and "killed by a signal" in rows[1]["message"]
    assert report["message"].startswith("rank 1 died")
    assert rows[0]["steps"] > 0  # rank 0's measurements survive
    assert "wrote no report" in report["notes"][0]


def test_a_rank_crashing_after_its_script_completed_keeps_the_measurements_and_says_so(data_straggler):
    # torch's gloo teardown aborts now and then at interpreter exit, after the work and the part.
    result, report = data_straggler
    assert result.returncode == 0, result.stderr[-3000:]
    assert report["outcome"] == "completed" and [r["outcome"] for r in report["ranks"]] == ["completed"] * 2
    assert report["ranks"][0]["steps"] == report["ranks"][1]["steps"] > 0
    assert any("after every rank's script had completed" in note for note in report["notes"])


@pytest.mark.parametrize("shared_folder", [False, True])
def test_under_plain_torchrun_rank_0_writes_the_one_merged_report(tm, shared_folder):
    tm.script("job.py", JOB)
    env = {**os.environ, "SLOW": "data", "COLUMNS": "120"}
    if shared_folder:  # what a job on several nodes sets: rank 0 still merges
        env["TRAINMEDIC_RANKS_DIR"] = str(tm.cwd / "parts")
    result = run_python(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "trainmedic",
            "run",
            "--json",
            "report.json",
            "job.py",
        ],
        cwd=tm.cwd,
        env=env,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = tm.report()
    assert report["straggler"]["rank"] == 1 and report["straggler"]["cause"] == "data"
    assert (result.stdout + result.stderr).count("trainmedic report") == 1
    if shared_folder:  # the parts were there; once merged, rank 0 removes them, not the folder
        assert (tm.cwd / "parts").is_dir() and not list((tm.cwd / "parts").iterdir())


def test_nproc_refuses_a_bad_count(tm):
    tm.script("job.py", JOB)
    result = tm("run", "--nproc", "0", "job.py")
    assert result.returncode == 2
    assert "--nproc" in result.stderr
