"""Reading another process's Python stacks from outside, with py-spy (``trainmedic attach``).

py-spy reads a process's memory through ``process_vm_readv``/ptrace; the process runs no code of
trainmedic's and is never imported into. ``--nonblocking`` keeps it that way: the target is not
paused while a stack is read (a stack read mid-change is dropped by py-spy or lands a frame
off: sampling noise, not a cost to the job). ``--idle`` keeps samples of a thread that waits (a
DataLoader's queue, a socket, a lock): without it, a job waiting on its data would show no data
time at all.

:func:`record` samples for a while and returns each thread's stacks in the order they were taken
(py-spy's speedscope output keeps that order; its ``raw`` output adds identical stacks up and
loses it, and with it the steps). :func:`dump` reads one stack per thread, now.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from trainmedic._os import pid_alive
from trainmedic.errors import AttachError

#: py-spy's default rate. py-spy itself takes ~7-9 % of another core at it (two threads read with
#: --idle); the job's steps were no slower within noise (benchmarks/attach_overhead.py).
DEFAULT_RATE_HZ = 100
_INSTALL = "pip install 'trainmedic[attach]'"
# py-spy names a thread by its OS id where it knows one, else (Python < 3.11 with --nonblocking,
# macOS) by its pthread id in hex.
_THREAD = re.compile(r'^(?:Process (?P<pid>\d+) )?Thread (?P<tid>0[xX][0-9A-Fa-f]+|\d+)(?: "(?P<name>.*)")?$')


@dataclass(frozen=True)
class PyFrame:
    """One Python frame as py-spy read it: the function, its file and the line it was at."""

    name: str
    filename: str
    line: int


@dataclass
class ThreadTrace:
    """One thread's samples, oldest first; each stack innermost frame first."""

    pid: int
    tid: int
    name: str
    stacks: list[tuple[PyFrame, ...]] = field(default_factory=list)
    #: Seconds between two samples, as asked of py-spy (it may fall behind on a loaded machine:
    #: the wall time of the window over the samples it got is the better figure, see record).
    interval_s: float = 1.0 / DEFAULT_RATE_HZ


@dataclass
class Recording:
    pid: int
    duration_s: float
    rate_hz: int
    threads: list[ThreadTrace]
    #: py-spy's own complaints (a lagging sampler, samples it could not read), for the notes.
    warnings: list[str] = field(default_factory=list)


def executable() -> str:
    """The py-spy program: beside this interpreter (a venv's bin) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("py-spy")
    if found is None:
        raise AttachError(
            "trainmedic attach reads the process's stacks with py-spy, which is not installed. "
            f"Install it with: {_INSTALL}"
        )
    return found


def check_process(pid: int) -> None:
    """Raise a clear AttachError unless ``pid`` is a live process this user may read."""
    if pid <= 0:
        raise AttachError(f"PID {pid} is not a process id; expected a positive number, as `ps` shows it")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise AttachError(
            f"no process with PID {pid} is running; find the training job's PID with `pgrep -af python` "
            "or `ps aux | grep train`"
        ) from None
    except PermissionError:
        raise AttachError(_no_permission(pid, "it belongs to another user")) from None
    if pid == os.getpid():
        raise AttachError(f"PID {pid} is trainmedic itself; give the PID of the training job")
    if not pid_alive(pid):  # a zombie: ended, its parent has not collected it
        raise AttachError(
            f"PID {pid} has ended (its parent has not collected it yet); find the running job's PID with "
            "`pgrep -af python`"
        )


def record(
    pid: int, duration_s: float, rate_hz: int = DEFAULT_RATE_HZ, subprocesses: bool = True
) -> Recording:
    """Sample ``pid`` (and its child processes) for ``duration_s`` seconds without pausing it."""
    check_process(pid)
    program = executable()
    with tempfile.TemporaryDirectory(prefix="trainmedic-attach-") as folder:
        out = Path(folder) / "stacks.json"
        command = [
            program,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(duration_s))),
            "--rate",
            str(rate_hz),
            "--format",
            "speedscope",
            "--output",
            str(out),
            "--nonblocking",
            "--idle",
            "--full-filenames",
        ]
        if subprocesses:
            command.append("--subprocesses")
        done = _run(command, pid, timeout=duration_s + 60)
        if not out.exists():
            raise AttachError(_failure(pid, done.stderr or done.stdout))
        try:
            document = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AttachError(
                f"py-spy's recording of PID {pid} could not be read ({exc}); try again"
            ) from None
    threads = parse_speedscope(document, pid)
    for thread in threads:
        thread.interval_s = 1.0 / rate_hz
    lagging = [line.strip() for line in (done.stderr or "").splitlines() if "behind" in line.lower()]
    return Recording(pid, float(duration_s), rate_hz, threads, warnings=lagging[:1])


def dump(pid: int, subprocesses: bool = False) -> list[ThreadTrace]:
    """One stack per thread of ``pid`` (and of its Python child processes), read now."""
    check_process(pid)
    threads = _dump_one(pid)
    if subprocesses:
        # py-spy's dump reads only the process it is given, whatever --subprocesses says.
        for child in _children(pid):
            try:
                threads.extend(_dump_one(child))
            except AttachError:
                continue  # a child that is not Python (a shell) or that ended meanwhile
    return threads


def _children(pid: int) -> list[int]:
    try:
        import psutil

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001 - the tree may change while it is read
        return []


def _dump_one(pid: int) -> list[ThreadTrace]:
    command = [executable(), "dump", "--pid", str(pid), "--json", "--nonblocking", "--full-filenames"]
    done = _run(command, pid, timeout=60)
    try:
        rows = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        rows = None
    if rows is None:
        raise AttachError(_failure(pid, done.stderr or done.stdout))
    threads = []
    for row in rows if isinstance(rows, list) else []:
        frames = tuple(
            PyFrame(f.get("name", "?"), f.get("filename", "?"), int(f.get("line") or 0))
            for f in row.get("frames", [])
        )
        threads.append(
            ThreadTrace(
                int(row.get("pid") or pid),
                int(row.get("os_thread_id") or row.get("thread_id") or 0),
                str(row.get("thread_name") or ""),
                [frames],
            )
        )
    return threads


def parse_speedscope(document: dict, pid: int) -> list[ThreadTrace]:
    """Each profile of py-spy's speedscope file as a thread's samples, in the order taken."""
    frames = [
        PyFrame(str(f.get("name", "?")), str(f.get("file", "?")), int(f.get("line") or 0))
        for f in document.get("shared", {}).get("frames", [])
    ]
    threads = []
    for profile in document.get("profiles", []):
        match = _THREAD.match(str(profile.get("name", "")))
        if match is None:
            continue
        trace = ThreadTrace(int(match["pid"] or pid), int(match["tid"], 0), match["name"] or "")
        # One entry per sample (each weighs one interval); speedscope lists a stack outermost first.
        trace.stacks = [
            tuple(frames[i] for i in reversed(stack) if not _is_process_label(frames[i]))
            for stack in profile.get("samples", [])
        ]
        threads.append(trace)
    return threads


def _is_process_label(frame: PyFrame) -> bool:
    # With --subprocesses py-spy roots each stack at a pseudo-frame naming its process.
    return not frame.filename and frame.name.startswith("process ")


def _run(command: list[str], pid: int, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise AttachError(
            f"py-spy did not finish reading PID {pid} within {timeout:.0f} s; try again"
        ) from None
    except OSError as exc:
        raise AttachError(f"py-spy could not be started ({exc}); reinstall it with: {_INSTALL}") from None


def _failure(pid: int, said: str) -> str:
    """py-spy's error as one line with the fix."""
    first = next((line.strip() for line in said.splitlines() if line.strip()), "no output")
    lower = said.lower()
    if "permission denied" in lower or "operation not permitted" in lower:
        return _no_permission(pid, "the system refused to let py-spy read it")
    if "failed to find python version" in lower or "no python processes found" in lower:
        return (
            f"PID {pid} is not a Python process py-spy can read (py-spy: {first}); give the PID of the "
            "python process that runs the training script (`pgrep -af python`), not its shell or launcher script"
        )
    if "failed to get process executable name" in lower or "no such process" in lower:
        return (
            f"PID {pid} ended before py-spy could read it ({first}); find the running job's PID with "
            "`pgrep -af python`"
        )
    if "version" in lower and "unsupported" in lower:
        return (
            f"py-spy cannot read the Python version PID {pid} runs ({first}); upgrade it with "
            "pip install -U py-spy, or run the job under `trainmedic run` instead"
        )
    return f"py-spy could not read PID {pid}: {first}"


def _no_permission(pid: int, why: str) -> str:
    scope = _ptrace_scope()
    hint = (
        f"this kernel allows reading only child processes (kernel.yama.ptrace_scope={scope}): run "
        f"`sudo trainmedic attach {pid}`, or `sudo sysctl kernel.yama.ptrace_scope=0`"
        if scope not in (None, "0")
        else f"run `sudo trainmedic attach {pid}` (or as the user that started the job)"
    )
    return (
        f"no permission to read PID {pid}: {why}. {hint}; in a container, start it with "
        "`--cap-add SYS_PTRACE`, or run the job under `trainmedic run` instead"
    )


def _ptrace_scope() -> str | None:
    try:
        return Path("/proc/sys/kernel/yama/ptrace_scope").read_text(encoding="ascii").strip()
    except OSError:
        return None
