"""Applying repairs: passes, overlaps, a repair that would not parse, and the user's file kept as
it was in everything the repair does not touch (line endings, encoding, permissions)."""

from __future__ import annotations

import ast
import os
import stat
from dataclasses import replace

from trainmedic.lint import get_rule, lint_source
from trainmedic.lint.autofix import apply_edits, fix_paths, repair_source
from trainmedic.lint.fixing import replace_node
from trainmedic.lint.model import Edit, Fix, Rule

PRINTS = (
    "for step, batch in enumerate(loader):\n"
    "    loss = model(batch)\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "    print('caf\u00e9', loss)\n"
)
GATED = PRINTS.replace("    print(", "    if step % 100 == 0:\n        print(")


def _names_rule(fixer) -> Rule:
    """A rule that flags every name ``x`` and repairs it with ``fixer``."""

    def check(context):
        return [(n, "x") for n in context.nodes(ast.Name) if n.id == "x"]

    return Rule("TM999", "test", "s", "w" * 81, "f" * 31, "", "", check, fixer=fixer)


def test_edits_count_characters_and_apply_from_the_end():
    source = "a = 'é'; b = 1\nc = 2\n"
    edits = [Edit(1, 10, 1, 15, "b = 3"), Edit(2, 1, 2, 1, "# c\n"), Edit(1, 1, 1, 1, "")]
    assert apply_edits(source, edits) == "a = 'é'; b = 3\n# c\nc = 2\n"


def test_a_file_keeps_its_line_endings_encoding_and_mode(tmp_path):
    path = tmp_path / "train.py"
    text = "# -*- coding: latin-1 -*-\n" + PRINTS
    path.write_bytes(text.replace("\n", "\r\n").encode("latin-1"))
    path.chmod(0o751)
    result = fix_paths([str(path)], ["TM111"])
    expected = ("# -*- coding: latin-1 -*-\n" + GATED).replace("\n", "\r\n").encode("latin-1")
    assert path.read_bytes() == expected
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o751
    assert [v.code for v in result.fixed] == ["TM111"] and result.remaining.violations == []


def test_diff_mode_writes_nothing_and_says_what_would_change(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(PRINTS, encoding="utf-8")
    result = fix_paths([str(path)], ["TM111"], write=False)
    assert path.read_text(encoding="utf-8") == PRINTS
    [repair] = result.repairs
    assert repair.after == GATED
    diff = repair.diff()
    assert diff.startswith(f"--- {path}\n+++ {path}\n@@ ")
    assert "-    print('café', loss)\n+    if step % 100 == 0:\n+        print('café', loss)\n" in diff


def test_a_finding_without_a_repair_stays_with_its_reason(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(PRINTS.replace("for step, batch in enumerate(loader)", "for batch in loader"))
    before = path.read_text()
    result = fix_paths([str(path)], ["TM111"])
    assert path.read_text() == before and result.repairs == []
    [left] = result.remaining.violations
    assert "no step counter in sight" in left.unfixable


def test_a_repair_that_would_not_parse_is_refused_and_said():
    rule = _names_rule(lambda context, node: Fix("break it", (replace_node(context, node, "x +"),)))
    after, fixed, left = repair_source("y = x\n", "t.py", [rule])
    assert after == "y = x\n" and fixed == []
    [kept] = left
    assert kept.unfixable.startswith("its repair did not give valid Python, so it was not applied")


def test_a_fixer_that_raises_leaves_the_finding_with_why():
    def fixer(context, node):
        raise KeyError("oops")

    after, fixed, left = repair_source("y = x\n", "t.py", [_names_rule(fixer)])
    assert after == "y = x\n" and fixed == []
    assert left[0].unfixable.startswith("the fixer failed on this code (KeyError")


def test_overlapping_repairs_take_another_pass():
    # Each finding rewrites its line up to its name; the second waits for the next pass and lands.
    def fixer(context, node):
        head = context.lines[node.lineno - 1][: node.col_offset]
        return Fix("rename", (Edit(node.lineno, 1, node.lineno, node.end_col_offset + 1, head + "z"),))

    after, fixed, left = repair_source("y = x + x\n", "t.py", [_names_rule(fixer)])
    assert after == "y = z + z\n"
    assert len(fixed) == 2 and left == []


def test_a_rule_without_a_fixer_says_why():
    rule = replace(get_rule("TM109"), not_fixable="the cache key is yours to choose")
    source = (
        "_loader = None\n"
        "def get_loader(batch_size):\n"
        "    global _loader\n"
        "    if _loader is None:\n"
        "        _loader = DataLoader(ds, batch_size=batch_size)\n"
        "    return _loader\n"
    )
    [violation] = lint_source(source, "t.py", [rule], with_fixes=True)
    assert violation.fix is None and violation.unfixable == "the cache key is yours to choose"
