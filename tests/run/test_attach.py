"""``trainmedic attach`` on real training processes: the verdict, kind and line it reads from outside.

Each job in ``attach_jobs/`` is a small torch training script that is slow for one known reason
and marks the line the report should point at with ``# expect-where``. The tests start them as
separate processes, sample each with py-spy through ``attach()`` (2 s, ~200 samples) and check
what the report says: categories, kinds and lines, never timings, since the machine may be busy
with other work. A last test checks that being read from outside changes nothing in the job: a
fixed-length run prints the same final loss whether or not it was sampled.

All jobs start together when the module does (``import torch`` takes seconds, and the imports
overlap), warm up, print ``ready`` and wait on stdin; a test lets its job go on only when it is
about to sample it, so no other job competes for the CPU while one is read.
"""

from __future__ import annotations

import ast
import contextlib
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainmedic.errors import AttachError
from trainmedic.run import attach as attach_mod
from trainmedic.run.probe import pyspy

JOBS = Path(__file__).parent / "attach_jobs"
#: Seconds each test samples its job: ~200 samples at py-spy's 100 Hz.
WINDOW_S = 2
#: Steps of the fixed-length run whose result must not change when it is sampled (3 of them are
#: warm-up, before the handshake): a few seconds of sampling on this machine.
FIXED_STEPS = 30
#: How long a job may take to import torch and warm up on a loaded 2-core machine.
READY_TIMEOUT_S = 120
#: The window of the fixed-length run: longer than the run, so the sampling ends when the job does.
WHOLE_RUN_S = 60
#: How long a job may take to end once its stop file exists.
STOP_TIMEOUT_S = 30


@dataclass
class Job:
    """A started job: its process, the lines it printed so far, and its stop file."""

    name: str
    script: Path
    proc: subprocess.Popen
    stop: Path
    stderr: Path
    lines: queue.Queue = field(default_factory=queue.Queue)
    warm: bool = False

    def wait_for(self, wanted: str, timeout: float) -> str:
        """The first line the job prints that starts with ``wanted``; fails with its stderr if it
        ends or stays silent first."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"{self.name} printed no {wanted!r} line within {timeout} s{self._said()}")
            if line is None:
                pytest.fail(
                    f"{self.name} ended (exit {self.proc.wait()}) before printing {wanted!r}{self._said()}"
                )
            if line.startswith(wanted):
                return line.strip()

    def ready(self) -> None:
        """Wait until the job is past its warm-up steps and waits for the handshake."""
        if not self.warm:
            self.wait_for("ready", READY_TIMEOUT_S)
            self.warm = True

    def go(self) -> None:
        """Let the job past its handshake: from here it trains until stopped."""
        self.ready()
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self) -> str:
        """Stop the job through its stop file and return its result line; it must exit 0."""
        self.stop.touch()
        result = self.wait_for("result", STOP_TIMEOUT_S)
        code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        assert code == 0, f"{self.name} exited {code}{self._said()}"
        return result

    def stop_now(self) -> None:
        """Ask the job to end, wherever it is: training (the stop file) or at its handshake (end of
        file on stdin)."""
        self.stop.touch()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()

    def end(self) -> None:
        """However the test went: the job ends, killed if it does not stop by itself."""
        self.stop_now()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _said(self) -> str:
        text = self.stderr.read_text(errors="replace").strip() if self.stderr.exists() else ""
        return f"; its stderr:\n{text}" if text else " (nothing on stderr)"


def start(name: str, folder: Path, *args: str) -> Job:
    """Start ``attach_jobs/<script>.py`` in ``folder`` (its working directory, where its stop file is)."""
    script = JOBS / f"{name.split(':')[0]}.py"
    stop = folder / f"{name.replace(':', '-')}.stop"
    stderr = folder / f"{name.replace(':', '-')}.stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script), "--stop", str(stop), *args],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    job = Job(name, script, proc, stop, stderr)

    def read() -> None:
        # A thread of its own, so a test can wait for a line with a timeout; None marks the end.
        for line in proc.stdout:
            job.lines.put(line)
        job.lines.put(None)

    threading.Thread(target=read, name=f"read-{name}", daemon=True).start()
    return job


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Every job of the module, started together and warm; each one ended (killed if need be) after."""
    try:
        pyspy.executable()
    except AttachError as exc:
        pytest.fail(f"these tests read real processes with py-spy, part of the test extra: {exc}")
    folder = tmp_path_factory.mktemp("attach-jobs")
    started: dict[str, Job] = {}
    try:
        for name, args in (
            ("data_bound", ()),
            ("compute_bound", ()),
            ("generation", ()),
            ("hung", ()),
            ("compute_bound:alone", ("--steps", str(FIXED_STEPS))),
            ("compute_bound:attached", ("--steps", str(FIXED_STEPS))),
        ):
            started[name] = start(name, folder, *args)
        # Every job warm before the first is sampled: none is still importing beside it.
        for job in started.values():
            job.ready()
        yield started
    finally:
        for job in started.values():  # all asked first, so they end side by side
            job.stop_now()
        for job in started.values():
            job.end()


def marked_line(script: Path) -> int:
    """The line number of the script's line marked ``# expect-where``."""
    marked = [
        i for i, line in enumerate(script.read_text().splitlines(), 1) if line.endswith("# expect-where")
    ]
    assert len(marked) == 1, f"{script.name} marks {len(marked)} lines with # expect-where"
    return marked[0]


def place(where: str | None) -> tuple[Path, int] | None:
    """A report's ``file:line`` as a resolved path and a line number."""
    if where is None:
        return None
    path, _, line = where.rpartition(":")
    return Path(path).resolve(), int(line)


def sample(job: Job) -> attach_mod.Attachment:
    """Let the job go on and read it from outside for ``WINDOW_S``."""
    job.go()
    return attach_mod.attach(job.proc.pid, duration_s=WINDOW_S)


def sample_until_end(job: Job) -> attach_mod.Attachment:
    """Let the job go on and read it from outside until it ends (py-spy stops when the process does)."""
    job.go()
    return attach_mod.attach(job.proc.pid, duration_s=WHOLE_RUN_S)


@pytest.mark.slow
def test_an_hdf5_read_per_batch_is_data_bound_at_the_read_line(jobs):
    job = jobs["data_bound"]
    report = sample(job).report
    job.finish()
    read = (job.script.resolve(), marked_line(job.script))
    assert report.outcome == "attached"
    assert report.evidence == "sampled", report.notes
    assert report.bottleneck == "data", report.notes
    top = report.findings[0]
    assert (top.category, top.kind, place(top.where)) == ("data", "hdf5", read)
    assert top.share > 0.5
    assert place(report.lines[0].where) == read
    assert report.lines[0].kind == "hdf5"


@pytest.mark.slow
def test_a_wide_mlp_on_prestacked_tensors_is_compute_bound_at_backward(jobs):
    job = jobs["compute_bound"]
    report = sample(job).report
    job.finish()
    backward = (job.script.resolve(), marked_line(job.script))
    assert report.evidence == "sampled", report.notes
    assert report.bottleneck == "compute", report.notes
    assert report.findings[0].category == "compute"
    assert report.findings[0].share > 0.5
    assert place(report.findings[0].where) == backward
    assert (place(report.lines[0].where), report.lines[0].category) == (backward, "compute")


@pytest.mark.slow
def test_a_per_sample_generation_loop_names_no_bottleneck_and_points_into_the_generator(jobs):
    job = jobs["generation"]
    report = sample(job).report
    job.finish()
    tree = ast.parse(job.script.read_text())
    generator = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "make_return")
    # From outside, tiny torch ops are the job's own lines with no library under them: no verdict.
    # Whether steps are found varies from run to run (the innermost loop is the per-sample one, and
    # its iterations are shorter than the time between two samples), and the note saying why no
    # bottleneck is named varies with it; the lines are there either way.
    assert report.bottleneck is None, report.notes
    assert any("No bottleneck is named" in note for note in report.notes), report.notes
    top = report.lines[0]
    assert (top.category, top.kind) == ("host_other", "own code")
    path, line = place(top.where)
    assert path == job.script.resolve()
    assert generator.lineno <= line <= generator.end_lineno, f"{top.where} is outside make_return()"


@pytest.mark.slow
def test_a_job_blocked_on_its_next_batch_is_reported_stuck_at_that_line(jobs):
    job = jobs["hung"]
    report = sample(job).report
    rows = attach_mod.dump(job.proc.pid)
    job.finish()
    blocked = (job.script.resolve(), marked_line(job.script))
    assert report.steps.count == 0
    assert report.bottleneck is None
    assert report.evidence == "whole run"
    stuck = [n for n in report.notes if n.startswith("Stuck:")]
    assert len(stuck) == 1, report.notes
    assert f"{job.script.name}:{blocked[1]}" in stuck[0]
    # The dump: the main thread waits inside the stdlib's queue, under the user's marked line.
    main = [
        (thread, user)
        for target, thread, user in rows
        if target.pid == job.proc.pid and thread.name == "MainThread"
    ]
    assert len(main) == 1, [(t.pid, thread.name) for t, thread, _ in rows]
    thread, user = main[0]
    frames = thread.stacks[0]
    innermost = next(i for i, mine in enumerate(user) if mine)
    assert (Path(frames[innermost].filename).resolve(), frames[innermost].line) == blocked
    assert frames[innermost].name == "fetch_batch"
    assert innermost > 0 and not any(user[:innermost]), "the queue's own frames are not the user's"


@pytest.mark.slow
def test_a_job_read_from_outside_ends_with_the_same_result_as_one_left_alone(jobs):
    alone, watched = jobs["compute_bound:alone"], jobs["compute_bound:attached"]
    alone.go()
    expected = alone.wait_for("result", READY_TIMEOUT_S)
    # Sampled from the handshake until it ends: every step after the warm-up ran under py-spy.
    attachment = sample_until_end(watched)
    assert attachment.report.outcome in ("ended", "attached")
    assert attachment.report.bottleneck == "compute", attachment.report.notes
    assert watched.wait_for("result", STOP_TIMEOUT_S) == expected
    assert expected.startswith(f"result steps={FIXED_STEPS} loss=")
    assert alone.proc.wait(timeout=STOP_TIMEOUT_S) == watched.proc.wait(timeout=STOP_TIMEOUT_S) == 0


def test_a_withheld_verdict_calls_no_two_levers_too_close():
    # From outside, the user's own code at 45 % against the DataLoader's 50 %: no bottleneck is
    # named, so the report does not also say which two are too close to call.
    from trainmedic.categories import CATEGORIES
    from trainmedic.run.diagnose.resolve import OWN_CODE
    from trainmedic.run.report.model import DeviceInfo, Finding, Report, StepStats

    report = Report(
        command=["job.py"],
        exit_code=0,
        outcome="attached",
        device=DeviceInfo("cpu", "EPYC"),
        steps=StepStats(30, 0.05, 0.06, 1.0, 3, "optimizer"),
        breakdown={c: {"data": 0.5, "host_other": 0.45}.get(c, 0.0) for c in CATEGORIES},
        bottleneck="data",
        close_call=["data", "host_other"],
        findings=[
            Finding("data", 0.5, "t", "e", "job.py:9", "f", 1.5, 2.0, "loader"),
            Finding("host_other", 0.45, "t", "e", "job.py:12", "f", 1.4, 1.8, OWN_CODE),
        ],
    )
    withheld = attach_mod._withhold_unseen(report, samples=200)
    assert (withheld.bottleneck, withheld.close_call) == (None, [])
    assert withheld.notes[0].startswith("No bottleneck is named")
