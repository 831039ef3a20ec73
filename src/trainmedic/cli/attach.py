"""``trainmedic attach PID``: sample a running job from outside, render run's report or a stack dump."""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from trainmedic.errors import AttachError, TrainmedicError
from trainmedic.userfiles import shown_path

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0}


@dataclass(frozen=True, kw_only=True)
class AttachOptions:
    pid: int
    duration: str
    rate: int
    dump: bool = False
    json_path: Path | None = None
    html_path: Path | None = None
    quiet: bool = False


def parse_duration(text: str) -> float:
    """``30s``, ``2m``, ``1.5`` (seconds) as seconds; an AttachError naming the value otherwise."""
    match = _DURATION.match(text)
    seconds = float(match[1]) * _UNITS[match[2]] if match else 0.0
    if seconds < 1.0:
        raise AttachError(
            f"--duration {text!r}: expected at least one second of sampling, as 30s, 2m or 45 (seconds)"
        )
    return seconds


def run_attach(options: AttachOptions, out: Console, err: Console) -> int:
    from trainmedic.run import attach
    from trainmedic.run.probe import pyspy

    try:
        if options.dump:
            rows = attach.dump(options.pid)
            render_dump(rows, out)
            return 0
        seconds = parse_duration(options.duration)
        pyspy.check_process(options.pid)
        err.print(
            f"trainmedic: reading PID {options.pid} from outside for {seconds:g} s at {options.rate} Hz "
            "(the job keeps running)...",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        attachment = attach.attach(options.pid, seconds, options.rate)
    except AttachError as exc:
        err.print(f"trainmedic: error: {exc}", style="red", markup=False, soft_wrap=True)
        return exc.exit_code
    except TrainmedicError as exc:  # py-spy missing (MissingExtraError), a bad value
        err.print(f"trainmedic: error: {exc}", style="red", markup=False, soft_wrap=True)
        return 2
    from trainmedic.cli.run import emit

    emit(attachment.report, options.json_path, options.html_path, options.quiet, out)
    return 0


def render_dump(rows, console: Console) -> None:
    """Each thread's stack, most recent call last as Python prints a traceback; the user's frames marked."""
    for target, thread, user in rows:
        head = Text()
        head.append(f"PID {target.pid}", style="bold")
        head.append(f" thread {thread.tid}" + (f" {thread.name!r}" if thread.name else ""))
        if target.rank is not None:
            head.append(f" (rank {target.rank})")
        console.print(head)
        stack = thread.stacks[0] if thread.stacks else ()
        if not stack:
            console.print("    (no Python frames)", style="dim")
        for frame, mine in reversed(list(zip(stack, user))):
            where = f"{shown_path(frame.filename, target.cwd)}:{frame.line} in {frame.name}"
            line = Text("  ▶ " if mine else "    ")
            line.append(where, style="bold" if mine else "dim")
            console.print(line)
            code = linecache.getline(frame.filename, frame.line).strip() if mine else ""
            if code:
                console.print(Text(f"        {code}"))
        console.print()
