"""[tool.trainmedic.lint] in pyproject.toml: where it is found, what each key does, how the command
line overrides it, and the error for each way it can be wrong."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from trainmedic.cli.lint import LintOptions, run_lint
from trainmedic.errors import LintError
from trainmedic.lint import LintConfig, find_config, lint_paths, load_config
from trainmedic.lint import config as config_module

PRINTS_EVERY_STEP = (
    "for batch in loader:\n    model(batch).sum().backward()\n    opt.step()\n    print(batch)\n"
)
SYNCS_EVERY_STEP = "for batch in loader:\n    loss = model(batch.cuda())\n    loss.backward()\n    opt.step()\n    t = loss.item()\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def found(paths, **kwargs) -> set[tuple[str, str]]:
    """(path relative to the first path's folder, code) of every finding."""
    root = Path(paths[0]) if Path(paths[0]).is_dir() else Path(paths[0]).parent
    result = lint_paths([str(p) for p in paths], **kwargs)
    return {(Path(v.path).relative_to(root).as_posix(), v.code) for v in result.violations}


def cli(*paths: str, **options) -> tuple[int, str, str]:
    """``trainmedic lint`` in this process: (exit code, stdout, stderr)."""
    out: list[str] = []
    err = Console(file=io.StringIO(), width=1000)
    code = run_lint(list(paths), LintOptions(**options), out=out.append, err=err)
    return code, "\n".join(out), err.file.getvalue()


@pytest.fixture
def project(tmp_path) -> Path:
    """A project with a TM111 finding and a TM107 finding in src/, and one TM111 in tests/."""
    write(tmp_path / "src" / "pkg" / "train.py", PRINTS_EVERY_STEP)
    write(tmp_path / "src" / "pkg" / "sync.py", SYNCS_EVERY_STEP)
    write(tmp_path / "tests" / "test_train.py", PRINTS_EVERY_STEP)
    return tmp_path


def test_the_nearest_pyproject_with_the_table_is_found_from_a_nested_path(project):
    write(project / "pyproject.toml", '[tool.trainmedic.lint]\nignore = ["TM111"]\n')
    # A pyproject.toml without the table (a sub-package's own) is passed over, as ruff does.
    write(project / "src" / "pyproject.toml", '[project]\nname = "pkg"\n')
    config = find_config(project / "src" / "pkg" / "train.py")
    assert config is not None and config.source == project / "pyproject.toml"
    assert config.ignore == ("TM111",) and config.root == project
    assert find_config(project / "src" / "pkg") == config
    # A nearer one with the table wins.
    write(project / "src" / "pkg" / "pyproject.toml", '[tool.trainmedic.lint]\nselect = ["TM111"]\n')
    assert find_config(project / "src" / "pkg" / "train.py").select == ("TM111",)


def test_no_config_up_to_the_root_is_none(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.ruff]\nline-length = 100\n")
    assert find_config(tmp_path / "train.py") is None


def test_the_command_line_reads_the_config_once_for_all_files(project, monkeypatch):
    write(project / "pyproject.toml", '[tool.trainmedic.lint]\nignore = ["TM111"]\n')
    reads = []
    real = config_module._table
    monkeypatch.setattr(config_module, "_table", lambda path: reads.append(path) or real(path))
    code, out, _ = cli(str(project / "src"), str(project / "tests"))
    assert (code, out.count("TM107"), out.count("TM111")) == (1, 1, 0)
    assert reads == [project / "pyproject.toml"]


def test_select_and_ignore_from_the_config(project):
    config = LintConfig(select=("TM1",), ignore=("TM107",), root=project)
    assert found([project], config=config) == {
        ("src/pkg/train.py", "TM111"),
        ("tests/test_train.py", "TM111"),
    }


def test_per_file_ignores_are_globs_relative_to_the_config_folder(project):
    write(project / "other" / "tests" / "test_x.py", PRINTS_EVERY_STEP)
    config = LintConfig(per_file_ignores=(("tests/**", ("TM111",)), ("sync.py", ("TM107",))), root=project)
    assert found([project], config=config) == {
        ("src/pkg/train.py", "TM111"),
        ("other/tests/test_x.py", "TM111"),  # "tests/**" is anchored at the config's folder
    }
    # A glob that matches a folder covers what is in it; "!" turns a glob around.
    config = LintConfig(per_file_ignores=(("src", ("TM1",)), ("!**/test_*.py", ("TM111",))), root=project)
    assert found([project], config=config) == {
        ("tests/test_train.py", "TM111"),
        ("other/tests/test_x.py", "TM111"),
    }


def test_exclude_skips_what_the_walk_finds_but_not_a_file_named_on_the_command_line(project):
    write(project / "legacy" / "old.py", PRINTS_EVERY_STEP)
    write(project / "src" / "legacy" / "old.py", PRINTS_EVERY_STEP)
    config = LintConfig(exclude=("legacy", "tests/test_*.py"), root=project)
    assert found([project], config=config) == {("src/pkg/train.py", "TM111"), ("src/pkg/sync.py", "TM107")}
    named = project / "legacy" / "old.py"
    assert found([named], config=config) == {("old.py", "TM111")}, "ruff's rule: named files are linted"
    forced = LintConfig(exclude=config.exclude, root=project, force_exclude=True)
    assert found([named], config=forced) == set()
    assert found([project / "tests" / "test_train.py"], config=forced) == set()


@pytest.mark.parametrize(
    ("pattern", "path", "excluded"),
    [
        ("build_*", "a/build_x/m.py", False),  # the folder itself is matched while walking
        ("build_*", "a/build_x", True),
        ("*.pyw", "a/b/gui.pyw", True),
        ("a/*.py", "a/b/m.py", False),  # * stays within one folder
        ("a/**/m.py", "a/b/c/m.py", True),
        ("a/**/m.py", "a/m.py", True),
        ("{docs,examples}", "examples", True),
        ("data[0-9]", "data7", True),
        ("data[!0-9]", "data7", False),
        ("/a/b.py", "a/b.py", True),
        ("./a/b.py", "a/b.py", True),
    ],
)
def test_glob_semantics(tmp_path, pattern, path, excluded):
    config = LintConfig(exclude=(pattern,), root=tmp_path)
    assert config.excluded(str(tmp_path / path)) is excluded


def test_command_line_select_replaces_the_config_selection_and_ignore_adds_to_it(project):
    config = LintConfig(select=("TM107",), ignore=("TM111",), root=project)
    assert config.overridden(["TM111"], None) == LintConfig(select=("TM111",), ignore=(), root=project)
    assert config.overridden(None, ["TM110"]).ignore == ("TM111", "TM110")
    everything = {("src/pkg/train.py", "TM111"), ("tests/test_train.py", "TM111")}
    assert found([project], select=["TM111"], config=config) == everything
    assert found([project], ignore=["TM107"], config=config) == set()
    # per-file-ignores still apply under a command-line --select, as in ruff.
    per_file = LintConfig(per_file_ignores=(("tests", ("TM111",)),), root=project)
    assert found([project], select=["TM111"], config=per_file) == {("src/pkg/train.py", "TM111")}


def test_config_and_isolated_on_the_command_line(project, monkeypatch):
    write(project / "pyproject.toml", '[tool.trainmedic.lint]\nselect = ["TM107"]\n')
    write(project / "ci.toml", '[tool.trainmedic.lint]\nselect = ["TM111"]\nexclude = ["tests"]\n')
    monkeypatch.chdir(project)
    assert cli()[1].splitlines() == [
        "src/pkg/sync.py:5:9: TM107 loss.item() makes the host wait for the GPU on every training step; "
        "keep running sums on the device (total += loss.detach()) and read them every N steps"
    ]
    assert [line.split(":")[0] for line in cli(config="ci.toml")[1].splitlines()] == ["src/pkg/train.py"]
    assert len(cli(isolated=True)[1].splitlines()) == 3
    code, _, err = cli(config="ci.toml", isolated=True)
    assert code == 2 and "--isolated ignores every config file; it cannot go with --config" in err
    code, _, err = cli(config="missing.toml")
    assert code == 2 and "--config 'missing.toml': no such file" in err
    write(project / "plain.toml", "[tool.black]\n")
    code, _, err = cli(config="plain.toml")
    assert code == 2 and "plain.toml has no [tool.trainmedic.lint] table" in err


def test_the_command_line_force_exclude_applies_to_named_files(project, monkeypatch):
    write(project / "pyproject.toml", '[tool.trainmedic.lint]\nexclude = ["tests"]\n')
    monkeypatch.chdir(project)
    assert cli("tests/test_train.py")[0] == 1
    code, out, err = cli("tests/test_train.py", force_exclude=True)
    assert (code, out) == (0, "") and "No findings (0 files checked)." in err


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'selct = ["TM1"]',
            "[tool.trainmedic.lint] has an unknown key 'selct'; did you mean 'select'? "
            "the keys are select, ignore, per-file-ignores, exclude",
        ),
        (
            'select = ["TM999"]',
            "[tool.trainmedic.lint] select: 'TM999' matches no rule; give codes or prefixes of TM101",
        ),
        (
            '[tool.trainmedic.lint.per-file-ignores]\n"tests/**" = ["TN1"]',
            "[tool.trainmedic.lint] per-file-ignores \"tests/**\": 'TN1' matches no rule",
        ),
        (
            'ignore = "TM111"',
            "[tool.trainmedic.lint] ignore = 'TM111' must be a list of rule codes or prefixes, "
            'e.g. ignore = ["TM1"]',
        ),
        (
            "exclude = [1]",
            '[tool.trainmedic.lint] exclude = [1] must be a list of globs, e.g. exclude = ["legacy", "notebooks/**"]',
        ),
        ('per-file-ignores = ["tests"]', "per-file-ignores = ['tests'] must be a table of glob = [codes]"),
        ('per-file-ignores = {"tests" = "TM111"}', "per-file-ignores \"tests\" = 'TM111' must be a list"),
        ('exclude = ["{a,b"]', "exclude: '{a,b' is not a valid glob"),
        ("select = []", "select = [] selects no rule"),
    ],
)
def test_each_mistake_is_an_error_naming_the_file_and_the_key(tmp_path, table, message):
    body = table if table.startswith("[") else f"[tool.trainmedic.lint]\n{table}\n"
    pyproject = write(tmp_path / "pyproject.toml", body + "\n")
    with pytest.raises(LintError) as error:
        find_config(tmp_path)
    assert str(error.value).startswith(f"{pyproject}: ")
    assert message in str(error.value)


def test_invalid_toml_names_the_file_and_the_line(tmp_path, monkeypatch):
    pyproject = write(tmp_path / "pyproject.toml", '[project]\nname = "x"\nversion = 1.2.3\n')
    with pytest.raises(LintError, match=r"pyproject.toml is not valid TOML: .*\(at line 3, column"):
        find_config(tmp_path / "train.py")
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "train.py", PRINTS_EVERY_STEP)
    code, out, err = cli("train.py")
    assert (code, out) == (2, "")
    assert err.startswith(f"trainmedic lint: error: {pyproject} is not valid TOML") and "line 3" in err
    assert cli("train.py", isolated=True)[0] == 1, "--isolated does not read it"


def test_load_config_reads_an_explicit_file(project):
    path = write(project / "lint.toml", '[tool.trainmedic.lint]\nexclude = ["tests"]\n')
    config = load_config(path)
    assert (config.exclude, config.root, config.source) == (("tests",), project, path)


# fix_paths takes the same settings: each file is repaired with its own rules. These use TM111's
# repair (the print put under `if step % 100 == 0:`).
COUNTED_PRINTS = (
    "for step, b in enumerate(loader):\n    model(b).sum().backward()\n    opt.step()\n    print(b)\n"
)


def test_fix_paths_repairs_each_file_with_its_own_rules(project):
    from trainmedic.lint.autofix import fix_paths

    kept = write(project / "tests" / "test_loop.py", COUNTED_PRINTS)
    fixed = write(project / "src" / "pkg" / "loop.py", COUNTED_PRINTS)
    config = LintConfig(per_file_ignores=(("tests", ("TM111",)),), root=project)
    result = fix_paths([str(project)], config=config)
    assert [Path(r.path).name for r in result.repairs] == ["loop.py"]
    assert "if step % 100 == 0:" in fixed.read_text(encoding="utf-8")
    assert kept.read_text(encoding="utf-8") == COUNTED_PRINTS
    assert all(not v.path.startswith(str(project / "tests")) for v in result.remaining.violations)


def test_a_file_that_cannot_be_rewritten_keeps_its_findings_and_the_others_are_fixed(project, monkeypatch):
    from trainmedic.lint import autofix

    first = write(project / "a.py", COUNTED_PRINTS)
    second = write(project / "b.py", COUNTED_PRINTS)
    real_write = autofix._write

    def read_only(path, repair):
        if path.name == "a.py":
            raise PermissionError(13, "Permission denied")
        real_write(path, repair)

    monkeypatch.setattr(autofix, "_write", read_only)
    result = autofix.fix_paths([str(first), str(second)], select=["TM111"])
    assert [Path(r.path).name for r in result.repairs] == ["b.py"]
    assert [(Path(v.path).name, v.code) for v in result.remaining.violations] == [("a.py", "TM111")]
    [problem] = result.remaining.problems
    assert problem.message == "cannot be rewritten (Permission denied); its findings were not fixed"
    assert result.remaining.failed and first.read_text(encoding="utf-8") == COUNTED_PRINTS
