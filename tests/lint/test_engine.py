"""lint_paths over real files: what is read, what is skipped, and what never stops the others."""

from pathlib import Path

import pytest

from trainmedic.errors import LintError
from trainmedic.lint import lint_paths, lint_source

PRINTS_EVERY_STEP = (
    "for batch in loader:\n    model(batch).sum().backward()\n    opt.step()\n    print(batch)\n"
)


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def test_a_syntax_error_is_reported_and_the_other_files_are_still_linted(tmp_path):
    write(tmp_path / "a_broken.py", "def train(:\n    pass\n")
    write(tmp_path / "b_train.py", PRINTS_EVERY_STEP)
    result = lint_paths([str(tmp_path)])
    assert [(v.path, v.line, v.code) for v in result.violations] == [
        (str(tmp_path / "b_train.py"), 4, "TM111")
    ]
    [problem] = result.problems
    assert (
        str(problem)
        == f"{tmp_path / 'a_broken.py'}:1:11: syntax error: invalid syntax; the file was not checked"
    )
    assert result.failed and result.files_checked == 1


def test_a_non_python_file_given_by_name_is_skipped_without_failing(tmp_path):
    notes = write(tmp_path / "notes.txt", "for x in y: print(x)\n")
    result = lint_paths([str(notes)])
    assert [str(p) for p in result.problems] == [
        f"{notes}: not a Python file (no .py suffix or python shebang), skipped"
    ]
    assert not result.failed


def test_a_script_without_suffix_but_with_a_python_shebang_is_linted(tmp_path):
    script = write(tmp_path / "train", "#!/usr/bin/env python3\n" + PRINTS_EVERY_STEP)
    assert [v.line for v in lint_paths([str(script)]).violations] == [5]


def test_binary_and_undecodable_files_are_problems_not_crashes(tmp_path):
    (tmp_path / "blob.py").write_bytes(b"\x00\x01\x02import torch\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    result = lint_paths([str(tmp_path)])
    assert sorted(Path(p.path).name for p in result.problems) == ["blob.py", "latin.py"]
    assert all("not checked" in p.message or "decoded" in p.message for p in result.problems)


def test_a_declared_encoding_is_honoured(tmp_path):
    write(
        tmp_path / "latin.py",
        "# -*- coding: latin-1 -*-\nname = 'é'\n" + PRINTS_EVERY_STEP,
        encoding="latin-1",
    )
    assert [v.line for v in lint_paths([str(tmp_path)]).violations] == [6]


def test_folders_of_other_peoples_code_are_not_walked(tmp_path):
    for folder in (".venv/lib", "build", "__pycache__", ".git", "pkg.egg-info"):
        write(tmp_path / folder / "train.py", PRINTS_EVERY_STEP)
    write(tmp_path / "src" / "train.py", PRINTS_EVERY_STEP)
    result = lint_paths([str(tmp_path)])
    assert {v.path for v in result.violations} == {str(tmp_path / "src" / "train.py")}


def test_installed_code_below_the_root_is_skipped_unless_asked_for_by_name(tmp_path):
    # The same user-file check as run and preflight: a dist-packages folder is installed code.
    write(tmp_path / "vendor" / "dist-packages" / "lib.py", PRINTS_EVERY_STEP)
    write(tmp_path / "train.py", PRINTS_EVERY_STEP)
    assert {v.path for v in lint_paths([str(tmp_path)]).violations} == {str(tmp_path / "train.py")}
    named = tmp_path / "vendor" / "dist-packages"
    assert {v.path for v in lint_paths([str(named)]).violations} == {str(named / "lib.py")}


def test_a_missing_path_is_a_usage_error_naming_it(tmp_path):
    with pytest.raises(LintError, match="no such file or directory: .*missing.py"):
        lint_paths([str(tmp_path / "missing.py")])


def test_select_and_ignore_take_codes_and_prefixes_and_refuse_typos(tmp_path):
    path = write(tmp_path / "train.py", PRINTS_EVERY_STEP)
    assert lint_paths([str(path)], select=["TM1"]).violations
    assert not lint_paths([str(path)], ignore=["tm111"]).violations
    with pytest.raises(LintError, match="'TM999' matches no rule"):
        lint_paths([str(path)], select=["TM999"])


def test_noqa_forms():
    source = PRINTS_EVERY_STEP.replace("print(batch)", "print(batch)  # noqa")
    assert lint_source(source) == []
    source = PRINTS_EVERY_STEP.replace("print(batch)", "print(batch)  # NOQA:E501,TM111")
    assert lint_source(source) == []
    source = PRINTS_EVERY_STEP.replace("print(batch)", "print('# noqa: TM111')")
    assert [v.code for v in lint_source(source)] == ["TM111"], "a noqa inside a string is not a comment"


def test_a_rule_that_fails_on_a_file_is_reported_and_the_other_rules_still_run(tmp_path):
    from dataclasses import replace

    from trainmedic.lint import get_rule
    from trainmedic.lint.engine import lint_bytes

    def broken(context):
        raise KeyError("surprise")

    rules = [replace(get_rule("TM101"), check=broken), get_rule("TM111")]
    violations, problems = lint_bytes(PRINTS_EVERY_STEP.encode(), "train.py", rules)
    assert [v.code for v in violations] == ["TM111"]
    assert [str(p) for p in problems] == [
        "train.py: TM101 failed on this file (KeyError: 'surprise'); the other rules still ran. "
        "Please report it with the file."
    ]


def test_a_too_deeply_nested_expression_is_a_problem_not_a_crash(tmp_path):
    write(tmp_path / "deep.py", "loss = model(" + "+".join(["x"] * 5000) + ")\n")
    write(tmp_path / "train.py", PRINTS_EVERY_STEP)
    result = lint_paths([str(tmp_path)])
    assert [v.line for v in result.violations] == [4]
    assert [Path(p.path).name for p in result.problems] == ["deep.py"]
    assert "nested too deeply" in result.problems[0].message


def test_the_linted_codes_own_warnings_are_not_printed(tmp_path, capfd):
    write(tmp_path / "esc.py", 'pattern = "\\d+"\n' + PRINTS_EVERY_STEP)
    assert [v.line for v in lint_paths([str(tmp_path)]).violations] == [5]
    assert capfd.readouterr().err == ""


def test_columns_count_characters_and_lines_follow_python_line_ends():
    source = (
        "for batch in loader:\n    model(batch).sum().backward()\n    opt.step()\n    é = 1; print(batch)\n"
    )
    [violation] = lint_source(source)
    assert (violation.line, violation.col) == (4, 12)  # 13 if bytes were counted
    source = "\f\nx = '\u2028'\n" + PRINTS_EVERY_STEP.replace("print(batch)", "print(batch)  # noqa: TM111")
    assert lint_source(source) == []


def test_a_file_reached_twice_is_linted_once(tmp_path):
    path = write(tmp_path / "src" / "train.py", PRINTS_EVERY_STEP)
    (tmp_path / "link.py").symlink_to(path)
    result = lint_paths([str(tmp_path), str(path)])
    assert len(result.violations) == 1


def test_virtualenvs_are_skipped_by_their_marker_not_their_name(tmp_path):
    write(tmp_path / "myvenv" / "pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path / "myvenv" / "lib" / "train.py", PRINTS_EVERY_STEP)
    write(tmp_path / "env" / "cartpole.py", PRINTS_EVERY_STEP)
    result = lint_paths([str(tmp_path)])
    assert {Path(v.path).relative_to(tmp_path).as_posix() for v in result.violations} == {"env/cartpole.py"}


def test_an_empty_selection_is_an_error_not_a_silent_pass(tmp_path):
    path = write(tmp_path / "train.py", PRINTS_EVERY_STEP)
    with pytest.raises(LintError, match="--select was given no codes"):
        lint_paths([str(path)], select=[" "])
