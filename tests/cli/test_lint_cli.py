"""trainmedic lint as a user (and pre-commit) runs it: output format, JSON contract, exit codes."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

PRINTS_EVERY_STEP = """
for step, batch in enumerate(loader):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    print("step", step)
"""
CLEAN = """
for step, batch in enumerate(loader):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print("step", step)
"""


@pytest.mark.slow
def test_findings_print_path_line_col_code_and_exit_1(tm):
    tm.script("train.py", PRINTS_EVERY_STEP)
    result = tm("lint", "train.py")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "train.py:5:5: TM111 print() runs on every training step; log every N steps "
        "(if step % log_every == 0) or once per epoch"
    ]
    assert "Found 1 finding in 1 file (1 file checked)" in result.stderr


def test_a_clean_folder_exits_0(tm):
    tm.script("train.py", CLEAN)
    result = tm("lint")
    assert (result.returncode, result.stdout) == (0, "")
    assert "No findings (1 file checked)." in result.stderr


def test_json_is_the_fixed_contract(tm):
    tm.script("train.py", PRINTS_EVERY_STEP)
    tm.script("clean.py", CLEAN)
    result = tm("lint", "--json", ".")
    assert result.returncode == 1
    assert json.loads(result.stdout) == [
        {
            "path": "train.py",
            "line": 5,
            "col": 5,
            "code": "TM111",
            "message": "print() runs on every training step; log every N steps (if step % log_every == 0) or once per epoch",
        }
    ]
    clean = tm("lint", "--json", "clean.py")
    assert (clean.returncode, json.loads(clean.stdout)) == (0, [])


def test_a_broken_file_is_named_and_does_not_stop_the_others(tm):
    tm.script("broken.py", "for x in :\n")
    tm.script("train.py", PRINTS_EVERY_STEP)
    result = tm("lint", "--json", "broken.py", "train.py")
    assert result.returncode == 1
    assert [f["path"] for f in json.loads(result.stdout)] == ["train.py"]
    assert "broken.py:1:10: syntax error: invalid syntax; the file was not checked" in result.stderr


def test_explain_prints_the_card(tm):
    result = tm("lint", "--explain", "tm111")
    assert result.returncode == 0
    assert result.stdout.startswith("TM111 log-every-step: ")
    assert "printed every batch" in result.stdout and "\nAfter\n" in result.stdout


def test_the_card_and_the_list_say_which_rules_repair(tm):
    card = tm("lint", "--explain", "TM110")
    assert "\nAutomatic fix\n    No: how many workers fit depends on the machine's cores" in card.stdout
    listed = {line.split()[0]: line for line in tm("lint", "--list-rules").stdout.splitlines()}
    assert listed["TM111"].split()[2] == "fix" and listed["TM110"].split()[2] != "fix"


def test_usage_errors_exit_2_and_name_the_bad_value(tm):
    tm.script("train.py", CLEAN)
    unknown = tm("lint", "--explain", "TM999")
    assert unknown.returncode == 2 and "unknown rule code 'TM999'; the rules are TM101" in unknown.stderr
    typo = tm("lint", "--select", "TN1", "train.py")
    assert typo.returncode == 2 and "'TN1' matches no rule" in typo.stderr
    missing = tm("lint", "nope.py")
    assert missing.returncode == 2 and "no such file or directory: 'nope.py'" in missing.stderr
    bad_flag = tm("lint", "--jsn")
    assert bad_flag.returncode == 2


def test_select_and_ignore(tm):
    tm.script("train.py", PRINTS_EVERY_STEP)
    assert tm("lint", "--ignore", "TM111", "train.py").returncode == 0
    assert tm("lint", "--select", "TM107,TM108", "train.py").returncode == 0
    assert tm("lint", "--select", "TM11", "train.py").returncode == 1


def test_lint_never_imports_torch_or_the_linted_code(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the linter ran my code')\n" + PRINTS_EVERY_STEP, encoding="utf-8")
    probe = (
        "import sys\n"
        "from trainmedic.cli.main import app\n"
        f"try:\n    app(args=['lint', {str(script)!r}], prog_name='trainmedic')\n"
        "except SystemExit as exit:\n    code = exit.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('exit', code)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "exit 1", result.stderr


def test_the_pre_commit_hook_manifest_is_valid_and_its_entry_runs(tmp_path):
    from pre_commit.clientlib import load_manifest

    repo = Path(__file__).resolve().parents[2]
    [hook] = load_manifest(str(repo / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "trainmedic-lint" and hook["types"] == ["python"]
    script = tmp_path / "train.py"
    script.write_text(PRINTS_EVERY_STEP, encoding="utf-8")
    # pre-commit runs `entry args... filenames...` inside the hook's environment.
    entry = [
        str(Path(sys.executable).parent / shlex.split(hook["entry"])[0]),
        *shlex.split(hook["entry"])[1:],
    ]
    result = subprocess.run([*entry, *hook["args"], str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "TM111" in result.stdout


# --fix and --diff. These use TM111's repair (the print put under `if step % 100 == 0:`, which is
# exactly CLEAN above) and its refusal where the loop has no step counter.
NO_STEP_COUNTER = """
for batch in loader:
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    print("loss", loss)
"""


def test_fix_rewrites_the_file_and_exits_0_when_nothing_is_left(tm):
    script = tm.script("train.py", PRINTS_EVERY_STEP)
    result = tm("lint", "--fix", "train.py")
    assert (result.returncode, result.stdout) == (0, "")
    assert script.read_text(encoding="utf-8") == CLEAN.lstrip()
    assert "Fixed 1 finding in 1 file; none left (1 file checked)." in result.stderr
    assert tm("lint", "train.py").returncode == 0


def test_fix_says_why_what_is_left_was_not_fixed_and_exits_1(tm):
    tm.script("train.py", PRINTS_EVERY_STEP)
    stuck = tm.script("eval.py", NO_STEP_COUNTER)
    result = tm("lint", "--fix", ".")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "eval.py:5:5: TM111 print() runs on every training step; log every N steps "
        "(if step % log_every == 0) or once per epoch",
        "  not fixed: the training loop has no step counter in sight; loop with `for step, batch in "
        "enumerate(loader):` and report when step % N == 0",
    ]
    assert stuck.read_text(encoding="utf-8") == NO_STEP_COUNTER.lstrip()
    assert "Fixed 1 finding in 1 file; 1 left (2 files checked)." in result.stderr
    assert "`trainmedic lint --explain CODE` says why" in result.stderr
    as_json = json.loads(tm("lint", "--fix", "--json", ".").stdout)
    assert [(f["path"], f["fix"], bool(f["unfixable"])) for f in as_json] == [("eval.py", None, True)]


def test_diff_prints_the_repairs_and_changes_nothing(tm):
    script = tm.script("train.py", PRINTS_EVERY_STEP)
    for args in (["--diff"], ["--fix", "--diff"]):  # --fix --diff is --diff, as in ruff
        result = tm("lint", *args, "train.py")
        assert result.returncode == 1, args
        assert (
            '\n-    print("step", step)\n+    if step % 100 == 0:\n+        print("step", step)'
            in result.stdout
        )
        assert result.stdout.splitlines()[1].endswith("train.py")  # the +++ line
        assert "Would fix 1 finding in 1 file; none would be left." in result.stderr
        assert script.read_text(encoding="utf-8") == PRINTS_EVERY_STEP.lstrip()
    tm.script("clean.py", CLEAN)
    clean = tm("lint", "--diff", "clean.py")
    assert (clean.returncode, clean.stdout) == (0, "")
    assert "No fixes to apply (1 file checked)." in clean.stderr


# --output-format


def test_output_format_json_is_the_json_flag(tm):
    tm.script("train.py", PRINTS_EVERY_STEP)
    assert tm("lint", "--output-format", "json", "train.py").stdout == tm("lint", "--json", "train.py").stdout
    both = tm("lint", "--json", "--output-format", "json", "train.py")
    assert both.returncode == 1 and json.loads(both.stdout)[0]["code"] == "TM111"


@pytest.mark.slow
def test_output_format_sarif_and_github(tm):
    tm.script("train.py", PRINTS_EVERY_STEP)
    tm.script("broken.py", "for x in :\n")
    sarif = tm("lint", "--output-format", "sarif", ".")
    assert sarif.returncode == 1
    [run] = json.loads(sarif.stdout)["runs"]
    [finding] = run["results"]
    assert (finding["ruleId"], finding["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) == (
        "TM111",
        "train.py",
    )
    assert finding["fixes"][0]["description"]["text"].startswith("report every 100 steps")
    assert run["invocations"][0]["executionSuccessful"] is False
    github = tm("lint", "--output-format", "github", ".")
    assert github.returncode == 1
    assert github.stdout.splitlines() == [
        "::warning file=train.py,line=5,col=5,title=TM111 log-every-step::print() runs on every training "
        "step; log every N steps (if step %25 log_every == 0) or once per epoch",
        "::error file=broken.py,line=1,col=10,title=trainmedic lint::syntax error: invalid syntax; "
        "the file was not checked",
    ]
    text = tm("lint", "--output-format", "text", "train.py")
    assert text.stdout == tm("lint", "train.py").stdout


def test_a_bad_output_format_is_a_usage_error_listing_the_formats(tm):
    tm.script("train.py", CLEAN)
    bad = tm("lint", "--output-format", "xml", "train.py")
    assert bad.returncode == 2
    assert "Invalid value for '--output-format'" in bad.stderr
    assert "'xml' is not one of 'text', 'json', 'sarif', 'github'" in bad.stderr
    clash = tm("lint", "--json", "--output-format", "sarif", "train.py")
    assert clash.returncode == 2
    assert "--json is --output-format json; it cannot go with --output-format sarif" in clash.stderr


# [tool.trainmedic.lint]


@pytest.mark.slow
def test_the_projects_pyproject_settings_apply_unless_isolated(tm):
    tm.script("pyproject.toml", '[tool.trainmedic.lint]\nexclude = ["scratch"]\nignore = ["TM111"]\n')
    (tm.cwd / "scratch").mkdir()
    tm.script("scratch/try.py", PRINTS_EVERY_STEP)
    tm.script("train.py", PRINTS_EVERY_STEP)
    result = tm("lint")
    assert (result.returncode, result.stdout) == (0, "")
    assert "No findings (1 file checked)." in result.stderr
    isolated = tm("lint", "--isolated")
    assert isolated.returncode == 1 and isolated.stdout.count("TM111") == 2
    broken = tm.script("pyproject.toml", "[tool.trainmedic.lint]\nignore = TM111\n")
    error = tm("lint")
    assert error.returncode == 2
    assert f"trainmedic lint: error: {broken} is not valid TOML" in error.stderr and "line 2" in error.stderr
