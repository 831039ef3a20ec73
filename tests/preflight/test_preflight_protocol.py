"""The parent <-> child protocol is spelt in one place (child.py), and the sitecustomize, which may
not import trainmedic, spells the same names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from trainmedic.checkpoint import preflight_log
from trainmedic.preflight import child

SITECUSTOMIZE = Path(child.SITE_DIR) / "sitecustomize.py"


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and ast.get_docstring(node) is not None
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def test_the_checkpointers_variables_are_its_own_constants():
    assert (child.DIR_VAR, child.HOLD_VAR) == (preflight_log.ENV, preflight_log.HOLD_ENV)


def test_the_sitecustomize_spells_child_pys_variables_and_file_names():
    literals = _string_literals(SITECUSTOMIZE)
    variables = {s for s in literals if s.startswith("TRAINMEDIC_")}
    assert variables == {child.DIR_VAR, child.PID_VAR, child.ROOT_VAR, child.PACKAGE_VAR}
    files = {s for s in literals if re.fullmatch(r"[\w.]+\.(txt|json|pid)", s)}
    assert files == {
        child.STACK,
        child.LOOPS,
        child.FAULTHANDLER,
        child.CONFIGS,
        child.EXCEPTION,
        child.TIMELINE,
        child.SITE_PID,
        child.SITE_ERRORS,
    }
