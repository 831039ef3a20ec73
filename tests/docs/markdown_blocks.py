"""The code blocks of the documentation, read the way the tests check them.

Three kinds of block are checked, so that a page cannot drift from the code:

* ``console`` blocks are transcripts: ``$ command`` lines, each followed by what it prints.
  A ``<!-- cwd: docs/examples/NAME -->`` comment just before the block names the folder the
  commands run in (a copy of it). Cut lines are written ``...``, as doctest's ELLIPSIS reads it.
* ``bash`` blocks are command lines without their output: the options each ``trainmedic``
  command line gives must be options of that command.
* ``python`` blocks must parse, and every name they import from trainmedic must exist.
"""

from __future__ import annotations

import doctest
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages a user reads: the README and every page of the site.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)(?:\s+[^`]*)?$")
#: A file the page includes whole (pymdownx.snippets): the block holds the file's text.
_SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')
_CWD = re.compile(r"<!--\s*cwd:\s*(?P<path>\S+)\s*-->")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    cwd: str | None  # a console block's folder, from the comment before it

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of a transcript and the output the page shows for it."""

    command: str
    want: str


def blocks(lang: str, pages: list[Path] = PAGES) -> list[Block]:
    found = []
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            opening = _FENCE.match(lines[i])
            if not opening or not opening["lang"]:
                i += 1
                continue
            indent = len(opening["indent"])
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            body = "\n".join(_included(line[indent:]) for line in lines[i + 1 : end])
            if opening["lang"] == lang:
                before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                cwd = _CWD.search(before)
                found.append(Block(page, i + 1, lang, body, cwd["path"] if cwd else None))
            i = end + 1
    return found


def _included(line: str) -> str:
    snippet = _SNIPPET.match(line.strip())
    return (ROOT / snippet["path"]).read_text(encoding="utf-8").rstrip("\n") if snippet else line


def steps(block: Block) -> list[Step]:
    """The transcript's commands, each with the lines after it up to the next ``$``."""
    found: list[Step] = []
    command, want = None, []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            if command is not None:
                found.append(Step(command, "\n".join(want)))
            command, want = line[2:].strip(), []
        elif command is None:
            raise ValueError(f"{block.name}: a console block starts with a `$ ` command line")
        else:
            want.append(line)
    if command is not None:
        found.append(Step(command, "\n".join(want)))
    return found


#: Numbers (times, shares, counts, sizes) vary by machine and run; a file's line number does not.
_NUMBER = re.compile(r"(?<!py:)(?<![\d.,])\d+(?:[.,]\d+)*")
_BAR = re.compile(r"[█·]+")


def normalized(text: str) -> str:
    return _BAR.sub("#", _NUMBER.sub("0", text))


def matches(want: str, got: str) -> bool:
    """Whether ``got`` is what the page shows: the same words and lines in the same order, any
    numbers in place of the page's, any text where the page says ``...``, any wrapping."""
    # Whitespace of any kind and length is one space; a `...` takes the spaces around it, so a
    # `...` line stands for any lines, none included.
    want_words = " ".join(normalized(want).split()).replace(" ...", "...").replace("... ", "...")
    got_words = " ".join(normalized(got).split())
    return doctest.OutputChecker().check_output(want_words, got_words, doctest.ELLIPSIS)


def first_mismatch(want: str, got: str) -> str | None:
    """The first line of the page's text that the output does not match, for the failure message."""
    lines = want.splitlines()
    for end in range(1, len(lines) + 1):
        if not matches("\n".join([*lines[:end], "..."]), got):
            return lines[end - 1]
    return None
