from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from trainmedic.lint import get_rule, lint_source


@pytest.fixture
def lint() -> Callable[..., list[tuple[int, str]]]:
    """lint(source, code) → [(line, message)] of that one rule's findings on dedented source."""

    def run(source: str, code: str) -> list[tuple[int, str]]:
        violations = lint_source(textwrap.dedent(source), "train.py", [get_rule(code)])
        return [(v.line, v.message) for v in violations]

    return run


@pytest.fixture
def lines(lint) -> Callable[..., list[int]]:
    """lines(source, code) → the line numbers that rule flags."""

    def run(source: str, code: str) -> list[int]:
        return [line for line, _ in lint(source, code)]

    return run
