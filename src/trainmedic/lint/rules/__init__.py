"""The rules, one module each; every module in this package defines ``RULE``.

Rules are found by listing the package, so adding a rule is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import lru_cache

from trainmedic.errors import LintError
from trainmedic.lint.model import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    """Every rule, sorted by code."""
    rules = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        rules.append(module.RULE)
    codes = [rule.code for rule in rules]
    if len(set(codes)) != len(codes):
        raise RuntimeError(f"two rules share a code: {sorted(codes)}")
    return tuple(sorted(rules, key=lambda rule: rule.code))


def get_rule(code: str) -> Rule:
    for rule in all_rules():
        if rule.code == code.strip().upper():
            return rule
    raise LintError(f"unknown rule code {code!r}; the rules are {_codes()}")


def select_rules(select: Iterable[str] | None, ignore: Iterable[str] | None) -> list[Rule]:
    """The rules to run: those matching ``select`` (codes or prefixes like ``TM1``; all when
    None) minus those matching ``ignore``. A code or prefix that matches no rule is an error,
    so a typo never silently turns a rule off."""
    rules = list(all_rules())
    if select is not None and not _checked(select):
        raise LintError(f"--select was given no codes; give codes or prefixes of {_codes()}")
    chosen = rules if select is None else [r for r in rules if _matches(r, _checked(select))]
    ignored = _checked(ignore or [])
    return [rule for rule in chosen if not _matches(rule, ignored)]


def _checked(codes: Iterable[str]) -> list[str]:
    cleaned = [code.strip().upper() for code in codes if code.strip()]
    for code in cleaned:
        if not any(rule.code.startswith(code) for rule in all_rules()):
            raise LintError(f"{code!r} matches no rule; give codes or prefixes of {_codes()}")
    return cleaned


def _matches(rule: Rule, codes: list[str]) -> bool:
    return any(rule.code.startswith(code) for code in codes)


def _codes() -> str:
    return ", ".join(rule.code for rule in all_rules())
