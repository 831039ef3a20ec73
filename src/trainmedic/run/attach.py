"""``trainmedic attach PID``: diagnose a training job that is already running, from outside.

py-spy reads the job's stacks (``probe/pyspy.py``); each thread's samples go through ``run``'s
own classifier and recorder (``probe/outside.py``) and ``run``'s own diagnosis, so the report
reads like ``trainmedic run``'s, with its evidence marked as sampled from outside.

The process tree is read as it is: a torchrun launcher's children that carry a ``RANK`` are its
ranks (one report each, merged as ``run --nproc`` merges them); a process whose main thread
runs a DataLoader's worker loop is a worker, shown as such and never taken for the job.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic._os import pid_alive
from trainmedic.errors import AttachError
from trainmedic.run.diagnose import diagnose, margin, ranks
from trainmedic.run.diagnose.resolve import OWN_CODE
from trainmedic.run.probe import device as device_probe
from trainmedic.run.probe import outside, pyspy
from trainmedic.run.probe.foreign import FrameBuilder
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.runner import RunOutcome
from trainmedic.run.report.model import DeviceInfo, Report
from trainmedic.userfiles import UserFiles, shown_path

DEFAULT_DURATION_S = 30.0
_WORKER_MODULE = "torch.utils.data._utils.worker"
_UNTIMED = "collective waits"
_UNTIMED_NOTE = (
    "not timed: collective waits — from outside, a rank waiting for the others inside DDP's all-reduce (C++, "
    "during backward) has no Python frame of its own, so the waits column and the straggler verdict are left "
    "out; compare the ranks' step breakdowns instead"
)
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.elastic", "torch.distributed.launch")


@dataclass(frozen=True)
class Target:
    """What the system says about a process: how it was started, where, with which Python."""

    pid: int
    command: list[str]
    cwd: str
    #: The interpreter's own library folders (``<prefix>/lib``): its stdlib is not the user's code.
    libraries: tuple[str, ...]
    rank: int | None = None
    world_size: int | None = None

    @classmethod
    def read(cls, pid: int) -> Target:
        proc = Path(f"/proc/{pid}")
        try:
            command = [a for a in (proc / "cmdline").read_bytes().decode(errors="replace").split("\0") if a]
        except OSError:
            command = []
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            cwd = os.getcwd()
        libraries: list[str] = []
        try:
            prefix = Path(os.path.realpath(proc / "exe")).parent.parent
            libraries.append(str(prefix / "lib"))
        except OSError:
            pass
        env = _environ(pid)
        rank = _int(env.get("RANK"))
        return cls(pid, command, cwd, tuple(libraries), rank, _int(env.get("WORLD_SIZE")))


@dataclass
class ProcessTrace:
    """One process of the job: what it is, and its main thread's samples."""

    target: Target
    role: str
    main: pyspy.ThreadTrace


@dataclass(frozen=True)
class _Window:
    """How the samples were taken: shared by every process's report."""

    duration_s: float
    wall_s: float
    device: DeviceInfo
    description: str
    outcome: RunOutcome

    @property
    def alive(self) -> bool:
        return self.outcome.outcome == "attached"


@dataclass
class Attachment:
    """What ``attach`` read: the report, and the processes it saw."""

    report: Report
    processes: list[ProcessTrace] = field(default_factory=list)


def attach(
    pid: int, duration_s: float = DEFAULT_DURATION_S, rate_hz: int = pyspy.DEFAULT_RATE_HZ
) -> Attachment:
    """Sample ``pid`` and its child processes for ``duration_s`` seconds and diagnose the job."""
    if not duration_s > 0:
        raise AttachError(f"--duration {duration_s!r}; expected a positive number of seconds, e.g. 30s")
    pyspy.check_process(pid)
    head = Target.read(pid)
    nvml = _gpu_sampler(pid)
    started = time.perf_counter()
    try:
        recording = pyspy.record(pid, duration_s, rate_hz)
    finally:
        if nvml is not None:
            nvml.stop()
    alive = _still_running(pid, recording)
    outcome = RunOutcome(
        0, "attached" if alive else "ended", None if alive else f"PID {pid} ended during the window"
    )
    window = _Window(
        duration_s,
        time.perf_counter() - started,
        _device(nvml),
        f"py-spy at {rate_hz} Hz, --nonblocking",
        outcome,
    )
    processes = _processes(recording, head)
    ranked = [p for p in processes if p.role.startswith("rank ")]
    if ranked and (head.rank is None or len(ranked) > 1):
        report = _ranks_report(ranked, head, window)
    else:
        job = next((p for p in processes if p.target.pid == pid), None) or next(
            (p for p in processes if p.role != "DataLoader worker"), None
        )
        if job is None:
            raise AttachError(f"py-spy read no Python thread of PID {pid}; is it a Python process?")
        report = _report(job, window)
    report.notes.extend(_process_notes(processes))
    report.notes.extend(recording.warnings)
    return Attachment(report, processes)


def dump(pid: int) -> list[tuple[Target, pyspy.ThreadTrace, list[bool]]]:
    """One stack per thread of ``pid`` and its children; with each frame, whether it is the user's."""
    pyspy.check_process(pid)
    rows = []
    targets: dict[int, Target] = {}
    for thread in pyspy.dump(pid, subprocesses=True):
        target = targets.get(thread.pid) or targets.setdefault(thread.pid, Target.read(thread.pid))
        user = UserFiles([target.cwd], anywhere=True, libraries=target.libraries)
        stack = thread.stacks[0] if thread.stacks else ()
        rows.append((target, thread, [frame.filename in user for frame in stack]))
    return rows


def _report(job: ProcessTrace, window: _Window) -> Report:
    target = job.target
    classifier = FrameClassifier(
        cwd=target.cwd,
        cuda=window.device.kind == "cuda",
        user=UserFiles([target.cwd], anywhere=True, libraries=target.libraries),
    )
    builder = FrameBuilder(tuple(target.libraries), needs_first_line=classifier.is_user_file)
    # A job that exits inside the window leaves empty stacks while its interpreter shuts down
    # (torch's teardown took ~2 s): its exit, not its training.
    while job.main.stacks and not job.main.stacks[-1]:
        job.main.stacks.pop()
    sampled = outside.classify(job.main, classifier, builder)
    samples = max(len(job.main.stacks), 1)
    # The samples' real spacing: py-spy falls behind on a loaded machine, and each sample then
    # stands for more than one interval. A job that ended early ran for less than the window.
    interval = min(window.duration_s, window.wall_s) / samples if window.alive else job.main.interval_s
    interval = max(interval, job.main.interval_s)
    m = outside.measurements(sampled, interval, samples * interval, window.device, window.description)
    report = diagnose(m, target.command or [str(target.pid)], window.outcome)
    return _withhold_unseen(report, m.samples)


def _ranks_report(ranked: list[ProcessTrace], head: Target, window: _Window) -> Report:
    parts: dict[int, dict[str, Any]] = {}  # rank -> its part, as ranks.merge reads them
    world = max((p.target.world_size or 0 for p in ranked), default=0) or len(ranked)
    for process in ranked:
        rank = process.target.rank if process.target.rank is not None else len(parts)
        report = _report(process, window)
        parts[rank] = {
            "state": "done",
            "report": report.to_dict(),
            "waits": [],
            "kinds": [],
            # Collective waits are timed by hooks inside the ranks; from outside they are not.
            "untimed": [_UNTIMED],
            "ended_at": time.time(),
        }
    merged = ranks.merge(parts, world, head.command or [str(head.pid)], exit_code=0)
    merged.notes = [
        _UNTIMED_NOTE if note.startswith(f"not timed: {_UNTIMED}") else note for note in merged.notes
    ]
    return merged


def _withhold_unseen(report: Report, samples: int) -> Report:
    """No bottleneck is named when the user's own code (which from outside could be tiny tensor
    ops, NumPy work or Python) holds the largest share, or one that noise could make the largest:
    the report points at it instead.

    A share read from ``samples`` samples is uncertain by its binomial error and by what moves
    between runs of one script (``margin.BETWEEN_RUNS_SD``); the leader must clear the own code
    by ``margin.Z`` of both, as ``margin.close_call`` asks of two levers."""
    own = next((f for f in report.findings if f.kind == OWN_CODE), None)
    known = max((f for f in report.findings if f.kind != OWN_CODE), key=lambda f: f.share, default=None)
    if own is None or (
        known is not None
        and known.share - _band(known.share, samples) > own.share + _band(own.share, samples)
    ):
        return report
    report.bottleneck = None
    report.close_call = []  # no lever is named, so no two are said to be too close
    where = own.where or "an unknown line"
    if known is None or own.share >= known.share:
        why = f"the largest share, {own.share:.0%}, is your own code at {where}"
    else:
        why = (
            f"your own code at {where} holds {own.share:.0%} against {known.category}'s {known.share:.0%}, too close "
            "to call within the sampling noise"
        )
    report.notes.insert(
        0, f"No bottleneck is named: {why}, and from outside what that code does cannot be measured."
    )
    return report


def _band(share: float, samples: int) -> float:
    """``margin.Z`` standard errors of a share read from ``samples`` samples, runs apart."""
    binomial = math.sqrt(max(share * (1 - share), 0.0) / max(samples, 1))
    return margin.Z * math.hypot(binomial, margin.BETWEEN_RUNS_SD)


def _processes(recording: pyspy.Recording, head: Target) -> list[ProcessTrace]:
    by_pid: dict[int, list[pyspy.ThreadTrace]] = {}
    for thread in recording.threads:
        by_pid.setdefault(thread.pid, []).append(thread)
    found = []
    for pid, threads in sorted(by_pid.items()):
        main = next(
            (t for t in threads if t.tid == pid or t.name == "MainThread"),
            max(threads, key=lambda t: len(t.stacks)),
        )
        target = head if pid == head.pid else Target.read(pid)
        found.append(ProcessTrace(target, _role(main, target, head), main))
    return found


def _role(main: pyspy.ThreadTrace, target: Target, head: Target) -> str:
    files = Counter(frame.filename for stack in main.stacks[:200] for frame in stack)
    if any(_WORKER_MODULE.replace(".", "/") in f for f in files):
        return "DataLoader worker"
    if any(any(m.replace(".", "/") in f for m in _LAUNCHER_MODULES) for f in files):
        return "torchrun launcher"
    if target.rank is not None:
        return f"rank {target.rank}"
    return "job" if target.pid == head.pid else "child process"


def _process_notes(processes: list[ProcessTrace]) -> list[str]:
    if len(processes) < 2:
        return []
    rows = []
    for p in processes:
        top = _top_user_line(p)
        rows.append(f"PID {p.target.pid} {p.role}" + (f" (most samples at {top})" if top else ""))
    return [f"Processes read: {'; '.join(rows)}."]


def _top_user_line(process: ProcessTrace) -> str | None:
    user = UserFiles([process.target.cwd], anywhere=True, libraries=process.target.libraries)
    lines: Counter[str] = Counter()
    for stack in process.main.stacks:
        frame = next((f for f in stack if f.filename in user), None)
        if frame is not None:
            lines[f"{shown_path(frame.filename, process.target.cwd)}:{frame.line}"] += 1
    if not lines:
        return None
    where, count = lines.most_common(1)[0]
    return f"{where}, {count / max(len(process.main.stacks), 1):.0%}"


def _gpu_sampler(pid: int) -> device_probe.NvmlSampler | None:
    """An NVML sampler on the GPU the job (or one of its children) runs on, if there is one."""
    if not device_probe.nvml_wanted():
        return None
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return None
    family = {pid} | _descendants(pid)
    try:
        pynvml.nvmlInit()
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if any(p.pid in family for p in running):
                sampler = device_probe.NvmlSampler(index=index)
                sampler.start()
                sampler.name = pynvml.nvmlDeviceGetName(handle)  # type: ignore[attr-defined]
                return sampler
    except Exception:  # noqa: BLE001 - no driver, no GPU, an NVML this driver cannot answer
        return None
    return None


def _device(nvml: device_probe.NvmlSampler | None) -> DeviceInfo:
    if nvml is not None:
        name = getattr(nvml, "name", "GPU")
        name = name.decode() if isinstance(name, bytes) else str(name)
        return DeviceInfo("cuda", name, {"nvml": nvml.summary(), "cpu": device_probe.cpu_name()})
    cpu = device_probe.cpu_name()
    return DeviceInfo("cpu", cpu, {"cpu": cpu, "cuda": "no GPU process found through NVML"})


def _descendants(pid: int) -> set[int]:
    try:
        import psutil

        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except Exception:  # noqa: BLE001 - the process may end while its tree is read
        return set()


def _still_running(pid: int, recording: pyspy.Recording) -> bool:
    """Whether the job outlived the window. py-spy stops when the job exits; the exit itself may
    still be under way then, so a recording that stopped short gives it a moment to finish."""
    main = max((len(t.stacks) for t in recording.threads if t.pid == pid), default=0)
    short = main < 0.8 * recording.duration_s * recording.rate_hz
    deadline = time.monotonic() + (2.0 if short else 0.0)
    while True:
        if not pid_alive(pid):
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
