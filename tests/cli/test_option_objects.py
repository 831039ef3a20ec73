"""The option objects the CLI builds take keywords only: a swapped pair of same-typed arguments
(budget and device, select and ignore) would otherwise pass unnoticed."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

OPTION_CLASSES = [
    ("trainmedic.cli.run_options", "RunOptions"),
    ("trainmedic.cli.attach", "AttachOptions"),
    ("trainmedic.cli.lint", "LintOptions"),
    ("trainmedic.cli.plan", "PlanOptions"),
    ("trainmedic.cli.preflight", "PreflightOptions"),
    ("trainmedic.cli.tune", "TuneOptions"),
    ("trainmedic.preflight.declarations", "Overrides"),
    ("trainmedic.preflight.declarations", "Experiment"),
    ("trainmedic.tune.search", "_Search"),
]


def _option_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(("module", "name"), OPTION_CLASSES, ids=[name for _, name in OPTION_CLASSES])
def test_option_objects_refuse_positional_arguments(module, name):
    cls = _option_class(module, name)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert fields and all(f.kw_only for f in fields), [f.name for f in fields if not f.kw_only]
    with pytest.raises(TypeError, match="positional argument"):
        cls(*[None] * len(fields))


def test_option_objects_are_built_by_keyword():
    from trainmedic.cli.lint import LintOptions
    from trainmedic.preflight.declarations import Overrides

    options = LintOptions(select="E1", ignore="W2")
    assert (options.select, options.ignore) == ("E1", "W2")
    overrides = Overrides(budget="5m", device="cpu", session_limit="1h")
    assert (overrides.budget, overrides.device, overrides.session_limit) == ("5m", "cpu", "1h")
