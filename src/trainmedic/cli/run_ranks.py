"""``trainmedic run`` on torchrun ranks: each rank's part, and the one merged report.

Two ways in, one report out:

* ``trainmedic run --nproc N train.py`` starts ``torchrun --standalone --nproc-per-node N`` with
  ``trainmedic run`` as every rank's program, waits for it, and merges the ranks' parts.
* ``torchrun --nproc-per-node N -m trainmedic run train.py`` (any torchrun launch) runs this
  on every rank; rank 0 waits for the others' parts after its own script ends and merges them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainmedic.cli.run_options import RunOptions
from trainmedic.errors import require_installed
from trainmedic.run.diagnose.ranks import merge, rank_payload
from trainmedic.run.probe import ranks
from trainmedic.run.probe.ranks import RankIdentity
from trainmedic.run.probe.runner import StopSignals
from trainmedic.run.probe.session import Measurements
from trainmedic.run.report.model import Report

#: How long rank 0 waits, once its own script has ended, for the other ranks' reports. Ranks
#: that synchronise every step end within a step of each other; a dead one is seen at once. Well
#: under the 30 s torchrun allows between its SIGTERM and its SIGKILL.
MERGE_WAIT_S = 20.0
#: Set by ``--nproc`` for its ranks: the parent merges, rank 0 does not.
PARENT_ENV = "TRAINMEDIC_RANKS_PARENT"


def launch(options: RunOptions, emit: Callable[[Report], None]) -> int:
    """Run the script on ``options.nproc`` local ranks under torchrun; emit the merged report."""
    # Only the ranks and torchrun import torch: this process merely starts and waits for them.
    require_installed("torch", "torch", "trainmedic run --nproc")
    nproc = options.nproc
    assert nproc is not None  # run() launches ranks for --nproc only
    folder = Path(tempfile.mkdtemp(prefix="trainmedic-ranks-"))
    command = (["-m", options.target] if options.module else [options.target]) + options.args
    rank_argv = [
        "--quiet",
        "--warmup",
        str(options.warmup),
        "--interval-ms",
        f"{options.interval_s * 1000:g}",
    ]
    if options.steps is not None:
        rank_argv += ["--steps", str(options.steps)]
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={options.nproc}",
        "-m",
        "trainmedic",
        "run",
        *rank_argv,
        *(["-m", options.target] if options.module else [options.target]),
        *options.args,
    ]
    try:
        child = subprocess.Popen(argv, env={**os.environ, ranks.PARTS_ENV: str(folder), PARENT_ENV: "1"})
        try:
            code = child.wait()
        except KeyboardInterrupt:
            # Ctrl+C reached torchrun and every rank too (one process group): let them finish
            # their reports, then merge what they wrote.
            code = child.wait()
        report = merge(ranks.read_parts(folder, nproc), nproc, command)
        if code != 0 and report.exit_code == 0:
            if _every_rank_completed(report, nproc):
                # Every script ended with 0 and every part is written: a process failed after
                # that, while exiting. The measurements stand; the exit code stays the scripts'.
                report.notes.append(
                    f"torchrun exited with code {code} after every rank's script had completed and written its "
                    "report: a rank's process failed while exiting (torch's gloo teardown at interpreter exit "
                    "aborts now and then; its output above says which rank); the measurements are complete"
                )
            else:
                report.exit_code, report.outcome = code, "exception"
                report.message = f"torchrun exited with code {code} (its output above says why)"
        emit(report)
        return report.exit_code
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _every_rank_completed(report: Report, nproc: int) -> bool:
    rows = report.ranks or []
    return len(rows) == nproc and all(r.outcome == "completed" and r.exit_code == 0 for r in rows)


def start_rank(identity: RankIdentity) -> Path:
    """This process is one rank: its stub part (host, pid) goes into the parts folder now."""
    folder = ranks.parts_dir(identity)
    ranks.write_part(folder, identity, ranks.RUNNING)
    return folder


class RankSignals(StopSignals):
    """A single run's signal handling, on a rank: torchrun stops every rank with SIGTERM when one
    fails, and SIGKILLs it 30 s later; the rank's part must be written before that."""

    def __init__(self) -> None:
        super().__init__(why="torchrun stops every rank when one fails")


def finish_rank(
    identity: RankIdentity,
    folder: Path,
    report: Report,
    measurements: Measurements,
    emit: Callable[[Report], None],
    script_ended_at: float | None = None,
) -> int:
    """Write this rank's part; on rank 0 of a plain torchrun launch, merge and emit the job's report."""
    ranks.write_part(folder, identity, ranks.DONE, rank_payload(report, measurements, script_ended_at))
    if identity.rank != 0 or os.environ.get(PARENT_ENV):
        return report.exit_code  # --nproc's parent merges; the other ranks stay quiet
    # When rank 0's own script failed, the others may be blocked in a collective waiting for it
    # (until this process exits): merge what is there now instead of waiting for them.
    wait = MERGE_WAIT_S if report.exit_code == 0 else 0.0
    parts = ranks.wait_for_parts(folder, identity.world_size, wait, run_id=identity.run_id)
    merged = merge(parts, identity.world_size, report.command)
    emit(merged)
    if os.environ.get(ranks.PARTS_ENV):  # the user's (shared) folder: only this job's parts go
        for rank in parts:
            ranks.part_path(folder, rank).unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return report.exit_code
