"""Which frame is the user's: tracebacks and stack dumps of a child, read back in the parent.

The user's line is the innermost frame in a file under the project root that is not the
interpreter's, not an installed package (site-packages, a venv) and not trainmedic's: a numpy
error raised three calls deep inside numpy is reported at the line of the user's that called it.
"""

from __future__ import annotations

import ast
import json
import linecache
import os
import re
from dataclasses import dataclass
from pathlib import Path

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
class Where:
    """The user's frame a run failed or was stuck at, and the loop it was in (for stuck runs)."""

    frame: Frame
    loop_line: int | None = None
    loop_source: str = ""

    def to_dict(self, root: Path) -> dict:
        out = self.frame.to_dict(root)
        out["loop_line"] = self.loop_line
        out["loop_source"] = self.loop_source
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
    """The frame, and the innermost ``for``/``while`` loop around its line (the loop that never
    ends is what the user needs to see, seed 004's phase-3 loop)."""
    frame = with_source(frame)
    loop = _enclosing_loop(frame.path, frame.line)
    if loop is None:
        return Where(frame)
    return Where(frame, loop, linecache.getline(frame.path, loop).strip())


def _enclosing_loop(path: str, line: int) -> int | None:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            end = getattr(node, "end_lineno", None) or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno > best):
                best = node.lineno
    return best
