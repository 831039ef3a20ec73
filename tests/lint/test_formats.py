"""The output formats on a small project: two findings in two files and a file that does not parse.

The SARIF log is validated against the official SARIF 2.1.0 schema (tests/lint/data, with its
licence), offline.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from trainmedic.errors import LintError
from trainmedic.lint import FORMATS, LintResult, Violation, all_rules, format_result, lint_paths
from trainmedic.lint.formats import format_github, format_json, format_sarif, format_text
from trainmedic.lint.model import Edit, FileProblem, Fix

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

PRINTS_EVERY_STEP = """\
for step, (x, y) in enumerate(loader):
    loss = model(x).mean()
    loss.backward()
    optimizer.step()
    print("step", step)
"""
SYNCS_EVERY_STEP = """\
for batch in loader:
    loss = model(batch.cuda()).mean()
    loss.backward()
    optimizer.step()
    total = loss.item()
"""

TM111 = "print() runs on every training step; log every N steps (if step % log_every == 0) or once per epoch"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """train.py (TM111), sub/eval_loop.py (TM107) and broken.py, linted from the project's folder."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "train.py").write_text(PRINTS_EVERY_STEP, encoding="utf-8")
    (tmp_path / "sub" / "eval_loop.py").write_text(SYNCS_EVERY_STEP, encoding="utf-8")
    (tmp_path / "broken.py").write_text("for x in :\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def found(with_fixes: bool = False) -> LintResult:
    return lint_paths(["."], with_fixes=with_fixes)


def validate_sarif(text: str) -> dict:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    log = json.loads(text)
    validator_class(schema, format_checker=jsonschema.FormatChecker()).validate(log)
    return log


def a_fixed_finding(path: str = "train.py") -> Violation:
    """A finding with a repair, built by hand so the format's contract does not wait on a fixer."""
    edit = Edit(5, 1, 5, 24, '    if step % 100 == 0:\n        print("step", step)')
    return Violation(path, 5, 5, "TM111", TM111, fix=Fix("report every 100 steps", (edit,)))


def test_text_is_one_line_per_finding(project):
    assert format_result(found(), "text").splitlines() == [
        "sub/eval_loop.py:5:13: TM107 loss.item() makes the host wait for the GPU on every training step; "
        "keep running sums on the device (total += loss.detach()) and read them every N steps",
        f"train.py:5:5: TM111 {TM111}",
    ]


def test_text_after_fix_says_why_a_finding_was_not_repaired():
    result = LintResult(
        violations=[
            Violation("a.py", 3, 1, "TM105", "opened per sample", unfixable="which file is not provable"),
            Violation("b.py", 1, 1, "TM111", "printed every step"),
        ]
    )
    assert format_text(result, show_unfixable=True).splitlines() == [
        "a.py:3:1: TM105 opened per sample",
        "  not fixed: which file is not provable",
        "b.py:1:1: TM111 printed every step",
    ]
    assert "not fixed" not in format_text(result)


def test_json_keeps_its_contract_and_adds_the_repair_when_computed(project):
    plain = json.loads(format_result(found(), "json"))
    assert [sorted(item) for item in plain] == [["code", "col", "line", "message", "path"]] * 2
    result = LintResult(
        violations=[a_fixed_finding(), Violation("b.py", 1, 1, "TM107", "m", unfixable="why")]
    )
    [fixed, unfixable] = json.loads(format_json(result))
    assert fixed["fix"] == {
        "description": "report every 100 steps",
        "edits": [
            {
                "line": 5,
                "col": 1,
                "end_line": 5,
                "end_col": 24,
                "text": '    if step % 100 == 0:\n        print("step", step)',
            }
        ],
    }
    assert (unfixable["fix"], unfixable["unfixable"]) == (None, "why")


def test_json_of_a_real_lint_with_fixes_has_a_repair_or_a_reason_for_every_finding(project):
    items = json.loads(format_json(found(with_fixes=True)))
    assert [item["code"] for item in items] == ["TM107", "TM111"]
    assert all("fix" in item for item in items)
    assert all(item["fix"] is not None or item["unfixable"] for item in items)


def test_sarif_is_valid_against_the_official_schema(project):
    log = validate_sarif(format_sarif(found(with_fixes=True)))
    [run] = log["runs"]
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-schema-2.1.0.json")
    driver = run["tool"]["driver"]
    assert driver["name"] == "trainmedic" and driver["version"]
    assert [rule["id"] for rule in driver["rules"]] == [rule.code for rule in all_rules()]
    tm111 = driver["rules"][[rule["id"] for rule in driver["rules"]].index("TM111")]
    assert tm111["name"] == "log-every-step"
    assert tm111["shortDescription"]["text"].startswith("print() or logger.info()")
    assert "printed every batch, 100 times an epoch" in tm111["fullDescription"]["text"]
    assert "```python" in tm111["help"]["markdown"]
    assert tm111["defaultConfiguration"] == {"level": "warning"}
    run["results"][0]["level"] = "fatal"  # the schema is really applied: a wrong level fails
    with pytest.raises(jsonschema.ValidationError, match="'fatal' is not one of"):
        validate_sarif(json.dumps(log))


def test_sarif_results_point_at_the_files_relative_to_the_source_root(project):
    run = json.loads(format_sarif(found()))["runs"][0]
    places = [
        (
            r["ruleId"],
            r["locations"][0]["physicalLocation"]["artifactLocation"],
            r["locations"][0]["physicalLocation"]["region"],
        )
        for r in run["results"]
    ]
    assert places == [
        ("TM107", {"uri": "sub/eval_loop.py", "uriBaseId": "%SRCROOT%"}, {"startLine": 5, "startColumn": 13}),
        ("TM111", {"uri": "train.py", "uriBaseId": "%SRCROOT%"}, {"startLine": 5, "startColumn": 5}),
    ]
    rules = run["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.as_uri() + "/"
    assert run["columnKind"] == "unicodeCodePoints"


def test_sarif_reports_a_file_it_could_not_parse_as_a_failed_invocation(project):
    [invocation] = json.loads(format_sarif(found()))["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    [note] = invocation["toolExecutionNotifications"]
    assert note["level"] == "error"
    assert note["message"]["text"] == "syntax error: invalid syntax; the file was not checked"
    assert note["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "broken.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 1, "startColumn": 10},
    }
    clean = json.loads(
        format_sarif(LintResult(problems=[FileProblem("notes.txt", "not Python", skipped=True)]))
    )
    [invocation] = clean["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is True  # a file skipped on purpose is not a failure
    assert invocation["toolExecutionNotifications"][0]["level"] == "note"


def test_sarif_carries_a_repair_as_a_fix_with_replacements(tmp_path):
    result = LintResult(violations=[a_fixed_finding("src/my train.py")])
    log = validate_sarif(format_sarif(result, root=tmp_path.parent / "elsewhere"))
    [sarif_result] = log["runs"][0]["results"]
    [fix] = sarif_result["fixes"]
    assert fix["description"] == {"text": "report every 100 steps"}
    [change] = fix["artifactChanges"]
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 5, "startColumn": 1, "endLine": 5, "endColumn": 24},
            "insertedContent": {"text": '    if step % 100 == 0:\n        print("step", step)'},
        }
    ]
    # A file outside the source root is named by its absolute file: URI, spaces escaped.
    location = sarif_result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == change["artifactLocation"]
    assert location["uri"].startswith("file:///") and location["uri"].endswith("/src/my%20train.py")
    assert "uriBaseId" not in location


def test_github_annotations_one_per_finding_and_an_error_per_broken_file(project):
    assert format_result(found(), "github").splitlines() == [
        "::warning file=sub/eval_loop.py,line=5,col=13,title=TM107 host-sync-per-step::loss.item() makes the "
        "host wait for the GPU on every training step; keep running sums on the device "
        "(total += loss.detach()) and read them every N steps",
        "::warning file=train.py,line=5,col=5,title=TM111 log-every-step::print() runs on every training "
        "step; log every N steps (if step %25 log_every == 0) or once per epoch",
        "::error file=broken.py,line=1,col=10,title=trainmedic lint::syntax error: invalid syntax; the file "
        "was not checked",
    ]


def test_github_escapes_what_would_end_a_value_or_the_command():
    result = LintResult(
        violations=[Violation("dir,x/a:b.py", 2, 3, "TM107", "100% of steps\r\nwait: yes, always")],
        problems=[FileProblem("c.py", "cannot be read: Permission denied")],
    )
    assert format_github(result).splitlines() == [
        "::warning file=dir%2Cx/a%3Ab.py,line=2,col=3,title=TM107 host-sync-per-step::"
        "100%25 of steps%0D%0Await: yes, always",
        "::error file=c.py,title=trainmedic lint::cannot be read: Permission denied",
    ]


def test_every_format_is_a_string_and_an_unknown_one_is_an_error(project):
    result = found()
    assert FORMATS == ("text", "json", "sarif", "github")
    assert all(isinstance(format_result(result, name), str) for name in FORMATS)
    with pytest.raises(
        LintError, match="unknown output format 'xml'; the formats are text, json, sarif, github"
    ):
        format_result(result, "xml")
