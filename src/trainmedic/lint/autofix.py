"""``trainmedic lint --fix`` and ``--diff``: apply the findings' mechanical repairs.

A file is repaired in passes, as ruff does: lint with fixes, apply every fix whose edits do not
overlap an earlier one's, check that the result still parses, lint again, until no fix applies
(one fix can make another's finding appear, or two fixes want the same lines). A fix whose result
would not parse is dropped and its finding is left, saying so: a fixer's bug never reaches the
user's file. Files are rewritten whole and atomically, in their own encoding and line endings.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainmedic._os import temp_sibling
from trainmedic.lint.config import LintConfig
from trainmedic.lint.engine import lint_paths, lint_text
from trainmedic.lint.model import Edit, FileProblem, Fix, LintResult, Rule, Violation

#: A fix that keeps producing findings for the next pass stops here (ruff stops at 100; our
#: fixers converge in one or two).
MAX_PASSES = 10

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass
class FileRepair:
    """One file's repair: its text before and after, and the findings fixed in it."""

    path: str
    before: str
    after: str
    encoding: str
    fixed: list[Violation] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.after != self.before

    def diff(self) -> str:
        """The unified diff from ``before`` to ``after``, both labelled with the path as given (as
        ruff labels them; ``patch -p0`` applies it from the folder the path is relative to)."""
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=self.path,
                tofile=self.path,
            )
        )


@dataclass
class FixResult:
    """What ``fix_paths`` did: each changed file's repair, and the findings left after it (with
    ``unfixable`` saying why each one was not repaired)."""

    repairs: list[FileRepair] = field(default_factory=list)
    remaining: LintResult = field(default_factory=LintResult)

    @property
    def fixed(self) -> list[Violation]:
        return [violation for repair in self.repairs for violation in repair.fixed]


def fix_paths(
    paths: list[str],
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    *,
    write: bool = True,
    config: LintConfig | None = None,
) -> FixResult:
    """Repair what can be repaired under ``paths``; ``write=False`` computes the repairs (for
    ``--diff``) and leaves every file as it was. ``config`` and ``select``/``ignore`` choose the
    rules as :func:`~trainmedic.lint.engine.lint_paths` does, each file with its own."""
    config = (config or LintConfig()).overridden(select, ignore)
    rules_for = config.rule_picker()
    # The selection is already folded into config: passing select/ignore again would re-apply them.
    found = lint_paths(paths, with_fixes=True, config=config)
    result = FixResult(remaining=LintResult(problems=found.problems, files_checked=found.files_checked))
    by_path: dict[str, list[Violation]] = {}
    for violation in found.violations:
        by_path.setdefault(violation.path, []).append(violation)
    for path, mine in sorted(by_path.items()):
        if not any(v.fix for v in mine):
            result.remaining.violations.extend(mine)
            continue
        try:
            repair, left = repair_file(path, rules_for(path))
            if repair.changed and write:
                _write(Path(path), repair)
        except OSError as exc:  # a read-only file keeps its findings; the other files are still fixed
            message = f"cannot be rewritten ({exc.strerror or exc}); its findings were not fixed"
            result.remaining.problems.append(FileProblem(path, message, checked=True))
            result.remaining.violations.extend(mine)
            continue
        if repair.changed:
            result.repairs.append(repair)
        result.remaining.violations.extend(left)
    result.remaining.violations.sort()
    result.remaining.problems.sort()
    return result


def repair_file(path: str, rules: list[Rule]) -> tuple[FileRepair, list[Violation]]:
    """The file's repair in memory and the findings left in the repaired text."""
    data = Path(path).read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    # newline="" keeps \r\n and \r as they are: the repair must not rewrite every line ending.
    before = io.TextIOWrapper(io.BytesIO(data), encoding=encoding, newline="").read()
    after, fixed, left = repair_source(before, path, rules)
    return FileRepair(path, before, after, encoding, fixed), left


def repair_source(source: str, path: str, rules: list[Rule]) -> tuple[str, list[Violation], list[Violation]]:
    """Repair one module's text: (the new text, the findings fixed, the findings left)."""
    fixed: list[Violation] = []
    broken: dict[tuple[str, str], str] = {}  # (code, message) of fixes whose result did not parse
    for _ in range(MAX_PASSES):
        violations, _problems = lint_text(source, path, rules, with_fixes=True)
        applied = False
        taken: list[Edit] = []
        for violation in sorted(violations, key=lambda v: (v.line, v.col, v.code)):
            fix = violation.fix
            if fix is None or (violation.code, violation.message) in broken:
                continue
            if all(edit in taken for edit in fix.edits):  # two findings, one repair (a print of .item())
                fixed.append(violation)
                continue
            if _overlaps(fix, taken):
                continue
            candidate = apply_edits(source, [*taken, *fix.edits])
            if not _parses(candidate):
                broken[violation.code, violation.message] = fix.description
                continue
            taken.extend(fix.edits)
            fixed.append(violation)
            applied = True
        if not applied:
            break
        source = apply_edits(source, taken)
    violations, _problems = lint_text(source, path, rules, with_fixes=True)
    left = [
        replace(
            v,
            fix=None,
            unfixable=(
                "its repair did not give valid Python, so it was not applied; please report it with the file"
                if (v.code, v.message) in broken
                else v.unfixable
                or "its repair overlaps another one that kept changing the same lines; fix it by hand"
            ),
        )
        for v in violations
    ]
    return source, fixed, left


def apply_edits(source: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits to ``source`` (positions as :class:`Edit` gives them)."""
    starts = [0] + [match.end() for match in _LINE_END.finditer(source)]

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + col - 1

    pieces, cursor = [], 0
    for edit in sorted(edits, key=lambda e: (e.line, e.col, e.end_line, e.end_col)):
        start, end = offset(edit.line, edit.col), offset(edit.end_line, edit.end_col)
        pieces.append(source[cursor:start])
        pieces.append(_line_endings_like(source, edit.text))
        cursor = end
    pieces.append(source[cursor:])
    return "".join(pieces)


def _line_endings_like(source: str, text: str) -> str:
    """A fixer writes ``\\n``; a file with ``\\r\\n`` endings gets ``\\r\\n`` in what is inserted."""
    match = _LINE_END.search(source)
    ending = match.group(0) if match else "\n"
    return text if ending == "\n" else text.replace("\n", ending)


def _overlaps(fix: Fix, taken: list[Edit]) -> bool:
    for edit in fix.edits:
        for other in taken:
            a = ((edit.line, edit.col), (edit.end_line, edit.end_col))
            b = ((other.line, other.col), (other.end_line, other.end_col))
            # Touching ranges overlap too: two insertions at one place have no defined order.
            if a[0] <= b[1] and b[0] <= a[1]:
                return True
    return False


def _parses(source: str) -> bool:
    try:
        compile(source, "<fixed>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _write(path: Path, repair: FileRepair) -> None:
    """Replace the file atomically, keeping its permission bits (an executable script stays one)."""
    mode = path.stat().st_mode
    tmp = temp_sibling(path)
    try:
        with open(tmp, "w", encoding=repair.encoding, newline="") as handle:
            handle.write(repair.after)
        os.chmod(tmp, mode & 0o7777)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
