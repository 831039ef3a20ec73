"""Stacks read from another process, shaped like the interpreter's own frames.

``trainmedic run`` classifies live frames (``frames.FrameClassifier``) and finds loops in them
(``loops.LoopFinder``). ``trainmedic attach`` reads the same stacks from outside (py-spy), as
file, function and line. :func:`chain` turns one such stack into objects with the four
attributes those readers use (``f_code``, ``f_lineno``, ``f_back``, ``f_globals['__name__']``),
so one classifier decides both, not a copy of it.

What a live frame has and a read one lacks is rebuilt from the files: the module's name from
the path under the target's library folders, a function's first line (its code object's
``co_firstlineno``) from the source's syntax tree.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from trainmedic.run.probe.frames import read_tree
from trainmedic.run.probe.pyspy import PyFrame

_PACKAGE_FOLDERS = ("site-packages", "dist-packages")
_STDLIB = re.compile(r"/lib/python3\.\d+t?/")
_FROZEN = re.compile(r"^<frozen ([\w.]+)>$")
_COMPREHENSIONS: dict[str, type[ast.expr]] = {
    "<listcomp>": ast.ListComp,
    "<setcomp>": ast.SetComp,
    "<dictcomp>": ast.DictComp,
    "<genexpr>": ast.GeneratorExp,
    "<lambda>": ast.Lambda,
}


@dataclass(frozen=True)
class ForeignCode:
    """What a code object says about itself, for a frame read from outside."""

    co_filename: str
    co_firstlineno: int
    co_name: str


class ForeignFrame:
    """A frame read from outside, with the attributes the frame readers use."""

    __slots__ = ("f_back", "f_code", "f_globals", "f_lineno")

    def __init__(self, code: ForeignCode, lineno: int, module: str, back: ForeignFrame | None) -> None:
        self.f_code = code
        self.f_lineno = lineno
        self.f_globals = {"__name__": module}
        self.f_back = back


class FrameBuilder:
    """Turns py-spy's frames into :class:`ForeignFrame` chains; caches per file and function.

    ``search_path`` holds the target's folders that modules are imported from (its library
    folders, then this interpreter's ``sys.path``): a file under one is named as Python names it.
    """

    def __init__(self, search_path: tuple[str, ...] = (), needs_first_line=None) -> None:
        #: Which files' functions need their first line (the user's: loops and advice read it);
        #: a library's code is told apart by file and name alone. All of them when None.
        self._needs_first_line = needs_first_line
        roots = [*search_path, *(p for p in sys.path if p)]
        self._roots = tuple(dict.fromkeys(os.path.join(os.path.realpath(r), "") for r in roots))
        self._codes: dict[tuple[str, str, int], tuple[ForeignCode, str]] = {}

    def chain(self, stack: tuple[PyFrame, ...]) -> ForeignFrame | None:
        """The innermost frame of ``stack`` (given innermost first), linked to its callers."""
        frame: ForeignFrame | None = None
        for raw in reversed(stack):
            code, module = self._code(raw)
            frame = ForeignFrame(code, raw.line, module, frame)
        return frame

    def _code(self, raw: PyFrame) -> tuple[ForeignCode, str]:
        key = (raw.filename, raw.name, raw.line)
        found = self._codes.get(key)
        if found is None:
            wanted = self._needs_first_line is None or self._needs_first_line(raw.filename)
            first = first_line(raw.filename, raw.name, raw.line) if wanted else 0
            found = self._codes[key] = (
                ForeignCode(raw.filename, first, raw.name),
                self.module_of(raw.filename),
            )
        return found

    @lru_cache(maxsize=4096)  # noqa: B019 - one builder per attach: the cache lives as long as it
    def module_of(self, path: str) -> str:
        """The module a file is imported as (``torch.nn.modules.linear``), or '' for a script."""
        frozen = _FROZEN.match(path)
        if frozen:
            return frozen[1]  # <frozen importlib._bootstrap>: a module compiled into the interpreter
        if not path or path.startswith("<"):
            return ""
        parts = path.split(os.sep)
        tail: list[str] | None = None
        for folder in _PACKAGE_FOLDERS:
            if folder in parts:
                index = len(parts) - 1 - parts[::-1].index(folder)
                tail = parts[index + 1 :]
                break
        if tail is None:
            stdlib = list(_STDLIB.finditer(path))
            if stdlib:
                tail = path[stdlib[-1].end() :].split(os.sep)
        if tail is None:
            real = os.path.realpath(path)
            root = max((r for r in self._roots if real.startswith(r)), key=len, default=None)
            if root is None or not _is_package(Path(real).parent):
                return ""  # a script run as __main__: its name says nothing about what it does
            tail = real[len(root) :].split(os.sep)
        if not tail or not tail[-1].endswith(".py"):
            return ""
        tail[-1] = tail[-1][:-3]
        if tail[-1] == "__init__":
            tail = tail[:-1]
        return ".".join(tail)


def _is_package(folder: Path) -> bool:
    return (folder / "__init__.py").is_file()


def first_line(filename: str, name: str, line: int) -> int:
    """``co_firstlineno`` of the function ``name`` that holds ``line`` in ``filename`` (0 when the
    file cannot be read or holds no such function)."""
    if name == "<module>":
        return 1
    wanted = _COMPREHENSIONS.get(name)
    best: tuple[int, int, int] | None = None  # (start, end, first line) of the innermost match
    for kind, node_name, start, end, first in _functions(filename):
        hit = kind is wanted if wanted is not None else kind is None and node_name == name
        if hit and start <= line <= end and (best is None or start > best[0]):
            best = (start, end, first)
    return best[2] if best is not None else 0


@lru_cache(maxsize=256)
def _functions(filename: str) -> tuple[tuple[type | None, str, int, int, int], ...]:
    """Every function, lambda and comprehension of a file, read once: (comprehension type or
    None for a def, name, first line, last line, co_firstlineno). A torch module's syntax tree
    took ~0.15 s to walk on a 2-vCPU VM: once per file, not once per sampled line."""
    tree = read_tree(filename) if filename and not filename.startswith("<") else None
    if tree is None:
        return ()
    kinds = tuple(_COMPREHENSIONS.values())
    found: list[tuple[type | None, str, int, int, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found.append((None, node.name, node.lineno, node.end_lineno or node.lineno, first))
        elif isinstance(node, kinds):
            found.append((type(node), "", node.lineno, node.end_lineno or node.lineno, node.lineno))
    return tuple(found)
