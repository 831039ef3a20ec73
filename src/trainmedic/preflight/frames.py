"""Which frame is the user's: tracebacks and stack dumps of a child, read back in the parent.

The user's line is the innermost frame in a file under the project root that is not the
interpreter's, not an installed package (site-packages, a venv) and not trainmedic's: a numpy
error raised three calls deep inside numpy is reported at the line of the user's that called it.
"""

from __future__ import annotations

import json
import linecache
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from trainmedic.preflight.loop_progress import loops_around
from trainmedic.userfiles import UserFiles, shown_path

_PY_FRAME = re.compile(r'^\s*File "(?P<path>.*)", line (?P<line>\d+),? in (?P<function>.*)$')
_TRACEBACK = "Traceback (most recent call last):"


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str
    source: str = ""

    def to_dict(self, root: Path) -> dict:
        return {
            "path": shown_path(self.path, root),
            "line": self.line,
            "function": self.function,
            "source": self.source,
        }


@dataclass(frozen=True)
class LoopProgress:
    """How far a loop of a stuck run got, read from its frame when the run was stopped
    (loop_progress.py); what is not known says why in ``unknown``, never a guess."""

    #: The counter's value, as the loop counts: ``for it in range(5000)`` at ``it = 812`` is at
    #: iteration 812 (812 done); a ``range(a, b, s)`` is counted from ``a`` in steps of ``s``.
    iteration: int | None = None
    total: int | None = None
    counter: str = ""  # what counts, as written: "it", "iter_num", "self.step"
    total_text: str = ""  # the total as written: 'range(cfg["max_iters"])', "max_iters"
    #: The command-line option that says the total ("--max_iters=5000"): where the frame did
    #: not (then it is the total), or saying the same (then it is where the total came from).
    total_from: str = ""
    #: The name the total goes by (``max_iters`` of ``range(cfg.max_iters)``): the option looked for.
    total_key: str = ""
    unknown: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Loop:
    """A loop of the user's on a stuck run's stack."""

    path: str
    line: int
    function: str
    source: str = ""
    progress: LoopProgress | None = None

    def to_dict(self, root: Path) -> dict:
        return {
            "path": shown_path(self.path, root),
            "line": self.line,
            "function": self.function,
            "source": self.source,
            "progress": self.progress.to_dict() if self.progress else None,
        }


@dataclass(frozen=True)
class Where:
    """The user's frame a run failed or was stuck at, and the loop it was in (for stuck runs).

    A stuck run's loop is the user's loop still iterating, which may be in an outer frame (the
    training loop of train.py while ``frame`` is model.py:27): then ``loop_path`` and
    ``loop_function`` name it ("": the frame's own).
    """

    frame: Frame
    loop_line: int | None = None
    loop_source: str = ""
    loop_path: str = ""
    loop_function: str = ""
    progress: LoopProgress | None = None
    #: The user's other loops on the stack whose iteration is known, outermost first.
    other_loops: tuple[Loop, ...] = ()

    @property
    def loop_in_frame(self) -> bool:
        """Is the loop in the frame's own function (its line shown under the loop's)?"""
        return self.loop_path in ("", self.frame.path) and self.loop_function in ("", self.frame.function)

    def to_dict(self, root: Path) -> dict:
        out = self.frame.to_dict(root)
        out["loop_line"] = self.loop_line
        out["loop_source"] = self.loop_source
        if self.loop_line is not None:  # a stuck run's loop; a failure's place keeps its keys
            out["loop_path"] = shown_path(self.loop_path or self.frame.path, root)
            out["loop_function"] = self.loop_function or self.frame.function
            out["progress"] = self.progress.to_dict() if self.progress else None
            out["other_loops"] = [loop.to_dict(root) for loop in self.other_loops]
        return out


def innermost_user(frames: list[Frame], user: UserFiles) -> Frame | None:
    for frame in reversed(frames):
        if frame.path in user:
            return frame
    return None


def with_source(frame: Frame) -> Frame:
    """The frame with its source line read from disk (the parent sees the same files)."""
    if frame.source or not os.path.isfile(frame.path):
        return frame
    return Frame(frame.path, frame.line, frame.function, linecache.getline(frame.path, frame.line).strip())


def resolve(frames: list[Frame], cwd: Path) -> list[Frame]:
    """Relative paths (a module found via '' on sys.path) made absolute against the child's cwd."""
    out = []
    for f in frames:
        path = f.path if f.path.startswith("<") or os.path.isabs(f.path) else str(cwd / f.path)
        out.append(Frame(path, f.line, f.function, f.source))
    return out


# -- failed runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    error: str  # the exception line: "ValueError: bad shape"
    frames: list[Frame]  # outermost first


def read_exception(path: Path) -> Failure | None:
    """What the child's excepthook wrote, or None (no uncaught exception, or another hook won)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        frames = [
            Frame(f["path"], int(f["line"] or 0), f["function"], f.get("source") or "")
            for f in data["frames"]
        ]
        return Failure(_error_line(data["text"].splitlines(), data["type"]), frames)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_traceback(stderr: str) -> Failure | None:
    """The last traceback printed on stderr: its frames and its exception line."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:
        return None
    frames: list[Frame] = []
    rest: list[str] = []
    for i, line in enumerate(lines[starts[-1] + 1 :]):
        match = _PY_FRAME.match(line)
        if match:
            frames.append(Frame(match["path"], int(match["line"]), match["function"].strip()))
        elif not line.startswith((" ", "\t")):
            rest = lines[starts[-1] + 1 + i :]
            break
    error = _error_line(rest, None)
    return Failure(error, frames) if error or frames else None


def _error_line(lines: list[str], kind: str | None) -> str:
    """The exception line: the one that starts with the exception's name (a SyntaxError prints
    the offending code first), else the first unindented line."""
    lines = [line for line in lines if line.strip()]
    if kind:
        for line in lines:
            stripped = line.strip()
            if (
                stripped == kind
                or stripped.startswith(kind + ":")
                or re.match(rf"^[\w.]*\.{re.escape(kind)}(:|$)", stripped)
            ):
                return stripped
    for line in lines:
        if not line.startswith((" ", "\t")):
            return line.strip()
    return lines[-1].strip() if lines else ""


# -- stuck runs -------------------------------------------------------------------------------


def main_thread_frames(stack_text: str, faulthandler_text: str, user: UserFiles) -> list[Frame]:
    """The main thread's frames (outermost first) from the Python dump, else faulthandler's."""
    threads = _threads(stack_text)
    for header, frames in threads:
        if header.startswith("Main thread"):
            return frames
    threads = _threads(faulthandler_text)
    if not threads:
        return []
    # faulthandler cannot tell which thread is the main one: the main thread runs the script's
    # <module> frame, so pick the thread that has it in a user file, else the most user frames.
    for _, frames in threads:
        if any(f.function == "<module>" and f.path in user for f in frames):
            return frames
    return max((frames for _, frames in threads), key=lambda fs: sum(f.path in user for f in fs))


def _threads(text: str) -> list[tuple[str, list[Frame]]]:
    threads: list[tuple[str, list[Frame]]] = []
    recent_first = False
    for line in text.splitlines():
        match = _PY_FRAME.match(line)
        if match and threads:
            threads[-1][1].append(Frame(match["path"], int(match["line"]), match["function"].strip()))
        elif line.strip().endswith(":") and "thread" in line.lower():
            if threads and recent_first:
                threads[-1][1].reverse()
            recent_first = "most recent call first" in line
            threads.append((line.strip(), []))
    if threads and recent_first:
        threads[-1][1].reverse()
    return threads


def stuck_where(frame: Frame) -> Where:
    """The frame, and the innermost ``for``/``while`` loop around its line in its own function;
    no progress (the memory plan's child, a run with no Python-level dump)."""
    frame = with_source(frame)
    sites = loops_around(frame.path, frame.line)
    if not sites:
        return Where(frame)
    return Where(frame, sites[-1].line, linecache.getline(frame.path, sites[-1].line).strip())


def stuck_in_loop(
    frames: list[Frame], live: dict | None, user: UserFiles, cwd: Path, argv: Sequence[str] = ()
) -> Where | None:
    """Where a stuck run was: the user's loop still iterating and how far it got, and the user's
    innermost frame; None without any frame.

    ``frames``: the main thread's, from the stack dumps; ``live``: loop_progress.read_loops'
    record of the same stack (None when the Python-level handler never ran: only the loops'
    places are known then). The loop is the one with the largest known total (the one a run of
    a few steps cannot finish: 5000 iterations of a training loop, not the 4 micro-steps inside
    it, nor the 3 phases around it), else the outermost one with a known count, else the
    outermost one. A command that is a library's own entry point (``python -m pkg``) has no
    frame of the user's: its innermost frame is told, and the loop around it.
    """
    frames = resolve(frames, cwd)
    innermost = innermost_user(frames, user)
    if innermost is None:
        return stuck_where(frames[-1]) if frames else None
    innermost = with_source(innermost)
    loops = _live_loops(live, user, cwd) if live is not None else None
    if loops is None:
        why = "the run did not answer in Python code when it was stopped (a long native call?)"
        loops = [
            Loop(f.path, site.line, f.function, progress=LoopProgress(unknown=why))
            for f in frames
            if f.path in user
            for site in loops_around(f.path, f.line)
        ]
    loops = [_sourced(_from_command_line(loop, argv)) for loop in _unique(loops)]
    if not loops:
        return Where(innermost)
    chosen = _the_loop(loops)
    others = tuple(
        loop for loop in loops if loop is not chosen and loop.progress and loop.progress.iteration is not None
    )
    same_file = chosen.path == innermost.path
    return Where(
        innermost,
        chosen.line,
        chosen.source,
        "" if same_file else chosen.path,
        "" if same_file and chosen.function == innermost.function else chosen.function,
        chosen.progress,
        others,
    )


def _live_loops(live: dict, user: UserFiles, cwd: Path) -> list[Loop] | None:
    frames = live.get("frames") if isinstance(live, dict) else None
    if not isinstance(frames, list):
        return None
    loops = []
    for frame in frames:
        try:
            path = str(frame["path"])
            path = path if os.path.isabs(path) else str(cwd / path)
            if path not in user:
                continue
            for record in frame["loops"]:
                loops.append(
                    Loop(path, int(record["line"]), str(frame["function"]), progress=_progress(record))
                )
        except (KeyError, TypeError, ValueError):
            continue  # a record we cannot read says nothing; the others still do
    return loops


def _progress(record: dict) -> LoopProgress:
    def number(key: str) -> int | None:
        value = record.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return LoopProgress(
        number("iteration"),
        number("total"),
        str(record.get("counter") or ""),
        str(record.get("total_text") or ""),
        total_key=str(record.get("total_key") or ""),
        unknown=str(record.get("unknown") or ""),
    )


def _from_command_line(loop: Loop, argv: Sequence[str]) -> Loop:
    """The loop with the total an option of the command line gives (``--max_iters=5000`` for
    ``range(cfg.max_iters)``): the total when the frame could not say it, else where it came from."""
    progress = loop.progress
    if progress is None or not progress.total_key:
        return loop
    found = command_line_option(argv, progress.total_key)
    if found is None:
        return loop
    text, value = found
    if progress.total is None:
        unknown = "" if progress.iteration is not None else progress.unknown
        return replace(loop, progress=replace(progress, total=value, total_from=text, unknown=unknown))
    if progress.total == value:
        return replace(loop, progress=replace(progress, total_from=text))
    return loop


def command_line_option(argv: Sequence[str], key: str) -> tuple[str, int] | None:
    """``("--max_iters=5000", 5000)``: the int option named ``key`` in ``argv`` (``--max_iters=N``,
    ``--max-iters N``, Hydra's ``train.max_iters=N``), as written; None when there is none."""
    want = key.lower().replace("-", "_")
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if not (name.startswith("-") or eq):
            continue
        if name.lstrip("-").rsplit(".", 1)[-1].lower().replace("-", "_") != want:
            continue
        text = arg
        if not eq:
            if i + 1 >= len(argv):
                continue
            value, text = argv[i + 1], f"{arg} {argv[i + 1]}"
        try:
            return text, int(value)
        except ValueError:
            try:
                number = float(value)  # 5e3
            except ValueError:
                continue
            if number.is_integer():
                return text, int(number)
    return None


def _unique(loops: list) -> list[Loop]:
    """One entry per loop (a recursion runs the same loop in several frames: the outermost)."""
    seen: set[tuple[str, int]] = set()
    out = []
    for loop in loops:
        if (loop.path, loop.line) not in seen:
            seen.add((loop.path, loop.line))
            out.append(loop)
    return out


def _sourced(loop: Loop) -> Loop:
    return replace(loop, source=linecache.getline(loop.path, loop.line).strip())


def _the_loop(loops: list[Loop]) -> Loop:
    def known(attribute: str) -> list[Loop]:
        return [loop for loop in loops if loop.progress and getattr(loop.progress, attribute) is not None]

    totals = [
        (loop, loop.progress.total) for loop in loops if loop.progress and loop.progress.total is not None
    ]
    if totals:
        return max(totals, key=lambda pair: pair[1])[0]  # the first (outermost) of equals
    counted = known("iteration")
    return counted[0] if counted else loops[0]
