"""What every fixer's test asks: the repaired text, checked to parse and to lint clean for the rule,
and the broken and repaired module run side by side on the same small data."""

from __future__ import annotations

import ast
import runpy
import textwrap
from pathlib import Path

from trainmedic.lint import get_rule, lint_source
from trainmedic.lint.autofix import repair_source


def repaired(source: str, code: str) -> str:
    """The source after ``code``'s fixes (dedented first). Asserts that the rule found something,
    that every finding was repaired, that the result parses and that it lints clean for that rule."""
    source = textwrap.dedent(source)
    rule = get_rule(code)
    before = lint_source(source, "train.py", [rule])
    assert before, f"{code} finds nothing in the broken example"
    after, fixed, left = repair_source(source, "train.py", [rule])
    assert left == [], f"{code} left findings: {[(v.line, v.message, v.unfixable) for v in left]}"
    assert len(fixed) >= len(before)
    ast.parse(after)
    assert lint_source(after, "train.py", [rule]) == []
    return after


def unfixable(source: str, code: str) -> list[str]:
    """The reasons ``code`` gives for not repairing each of its findings; asserts the text is
    left exactly as it was."""
    source = textwrap.dedent(source)
    rule = get_rule(code)
    after, fixed, left = repair_source(source, "train.py", [rule])
    assert after == source and fixed == []
    assert left, f"{code} finds nothing"
    return [v.unfixable for v in left]


def run_module(source: str, folder: Path, name: str = "train.py", **init_globals) -> dict:
    """Run ``source`` as a script in ``folder`` (its own file, so tracebacks and ``__file__`` are
    real) and return its globals; ``init_globals`` are the data it is given."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(source, encoding="utf-8")
    return runpy.run_path(str(path), init_globals=init_globals, run_name="__main__")
