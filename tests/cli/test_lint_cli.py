"""trainmedic lint as a user (and pre-commit) runs it: output format, JSON contract, exit codes."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

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
    assert "Seed 002" in result.stdout and "\nAfter\n" in result.stdout


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
