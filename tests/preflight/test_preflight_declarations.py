"""[tool.trainmedic.preflight] in pyproject.toml and the command line: what is read, what is refused."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from trainmedic.errors import PreflightError
from trainmedic.preflight import Overrides, load_settings
from trainmedic.preflight.child import child_argv, child_env
from trainmedic.preflight.declarations import DEFAULT_BUDGET, find_pyproject

FULL = """
[project]
name = "nsgf"

[tool.trainmedic.preflight]
budget = "90s"
device = "t4"
session_limit = "9h"
resume_check = false

[tool.trainmedic.preflight.experiments]
toy2d = "python train.py --dataset 2d --train-iters 5"
mnist = { command = "python train.py --dataset mnist --train-iters 5", budget = "3m", plan = "model.py:build", batch = 128, precision = "BF16", steps = 40000, step_time = "0.62s", env = { DATA = "tiny", SEED = 3 } }
"""


def test_every_key_is_read(project):
    project.pyproject(FULL)
    settings = project.settings()
    assert settings.root == project.root.resolve()
    assert settings.pyproject == project.root.resolve() / "pyproject.toml"
    assert (settings.device, settings.session_limit, settings.resume_check) == ("t4", 9 * 3600.0, False)
    toy, mnist = settings.experiments
    assert (toy.name, toy.command, toy.budget, toy.plan, toy.steps) == (
        "toy2d",
        "python train.py --dataset 2d --train-iters 5",
        90.0,
        None,
        None,
    )
    assert (mnist.budget, mnist.plan, mnist.batch, mnist.precision) == (180.0, "model.py:build", 128, "bf16")
    assert (mnist.steps, mnist.step_time, dict(mnist.env)) == (40000, 0.62, {"DATA": "tiny", "SEED": "3"})
    assert toy.cwd is None and mnist.cwd is None


def test_defaults(project):
    project.pyproject('[tool.trainmedic.preflight.experiments]\ntoy = "python t.py"\n')
    settings = project.settings()
    assert (settings.device, settings.session_limit, settings.resume_check) == (None, None, True)
    assert settings.experiments[0].budget == DEFAULT_BUDGET == 120.0


def test_found_from_a_subfolder_and_run_in_the_project_root(project):
    project.pyproject('[tool.trainmedic.preflight.experiments]\ntoy = "python t.py"\n')
    sub = project.root / "src" / "pkg"
    sub.mkdir(parents=True)
    settings = load_settings(Overrides(), cwd=sub)
    assert settings.root == project.root.resolve()
    assert find_pyproject(sub) == project.root.resolve() / "pyproject.toml"
    assert load_settings(Overrides(project=sub), cwd=Path("/")).root == project.root.resolve()


def test_names_choose_experiments_in_the_order_given(project):
    project.pyproject(FULL)
    assert [e.name for e in project.settings("mnist", "toy2d", "mnist").experiments] == ["mnist", "toy2d"]


def test_command_line_wins(project):
    project.pyproject(FULL)
    settings = project.settings(budget="5s", device="a100-80gb", session_limit="12h", resume_check=True)
    assert (settings.device, settings.session_limit, settings.resume_check) == (
        "a100-80gb",
        12 * 3600.0,
        True,
    )
    assert [e.budget for e in settings.experiments] == [5.0, 5.0]  # --budget caps every experiment


def test_commands_need_no_pyproject(project):
    settings = project.settings(commands=("python a.py --x 1", "python a.py --x 1"))
    assert settings.pyproject is None and settings.root == project.root.resolve()
    assert [e.name for e in settings.experiments] == ["python a.py --x 1", "python a.py --x 1 (2)"]
    assert all(e.cwd == project.root.resolve() for e in settings.experiments)


def test_commands_alone_skip_the_declared_ones_and_names_add_them(project):
    project.pyproject(FULL)
    assert [e.name for e in project.settings(commands=("python b.py",)).experiments] == ["python b.py"]
    assert [e.name for e in project.settings("toy2d", commands=("python b.py",)).experiments] == [
        "toy2d",
        "python b.py",
    ]


def test_the_pyproject_is_the_source_only_when_a_declared_experiment_runs(project):
    # A pyproject with experiments, but only --command ones chosen: the report must not say
    # they came from pyproject.toml.
    path = project.pyproject(FULL).resolve()
    alone = project.settings(commands=("python b.py",))
    assert alone.pyproject is None and alone.root == project.root.resolve()
    assert [e.from_command_line for e in alone.experiments] == [True]
    both = project.settings("toy2d", commands=("python b.py",))
    assert both.pyproject == path
    assert [e.from_command_line for e in both.experiments] == [False, True]
    declared = project.settings()
    assert declared.pyproject == path and not any(e.from_command_line for e in declared.experiments)


@pytest.mark.parametrize(
    "table, expected",
    [
        (
            '[tool.trainmedic.preflight]\nbudget = "2x"\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            "[tool.trainmedic.preflight] budget = '2x': cannot read '2x' as a duration",
        ),
        (
            '[tool.trainmedic.preflight]\nbudget = 0\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            'budget = 0: expected a duration above zero, e.g. budget = "2m"',
        ),
        (
            '[tool.trainmedic.preflight]\nbudget = true\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            "budget = True",
        ),
        (
            '[tool.trainmedic.preflight]\ndevice = "t5"\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            "[tool.trainmedic.preflight] device = 't5': unknown GPU 't5'",
        ),
        (
            '[tool.trainmedic.preflight]\nsession_limit = "nine hours"\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            "session_limit = 'nine hours'",
        ),
        (
            '[tool.trainmedic.preflight]\nresume_check = "yes"\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            "resume_check = 'yes': expected true or false, e.g. resume_check = false",
        ),
        (
            '[tool.trainmedic.preflight]\nbudgett = "2m"\n[tool.trainmedic.preflight.experiments]\na = "python a.py"',
            "unknown key 'budgett'; did you mean 'budget'?",
        ),
        (
            '[tool.trainmedic.preflight]\nexperiments = ["python a.py"]',
            "experiments = ['python a.py']: expected a table of name = \"command\"",
        ),
        (
            "[tool.trainmedic.preflight.experiments]\na = 3",
            "[tool.trainmedic.preflight.experiments] a = 3: expected a command string or a table",
        ),
        ('[tool.trainmedic.preflight.experiments]\na = ""', "a = '': expected a command line"),
        (
            '[tool.trainmedic.preflight.experiments]\na = "python \'a.py"',
            "cannot be split into arguments (No closing quotation); close the quote",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { budget = "1m" }',
            "[tool.trainmedic.preflight.experiments.a] has no command",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", batch = "128", plan = "m.py:build" }',
            "[tool.trainmedic.preflight.experiments.a] batch = '128': expected a whole number of at least 1, e.g. batch = 128",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", plan = "m.py:build" }',
            "has plan = 'm.py:build' but no batch: add the batch size to plan, e.g. batch = 128",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", plan = 3, batch = 2 }',
            'plan = 3: expected "FILE.py:FUNCTION"',
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", precision = "fp8" }',
            "precision = 'fp8': expected one of fp32, tf32, bf16, fp16",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", steps = 0 }',
            "steps = 0: expected a whole number of at least 1",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", steps = 1.5 }',
            "steps = 1.5",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", step_time = "fast" }',
            "step_time = 'fast': cannot read 'fast' as a duration",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", env = { X = [1] } }',
            "env.X = [1]: expected a string (environment values are text)",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", env = "X=1" }',
            "env = 'X=1': expected a table of strings",
        ),
        (
            '[tool.trainmedic.preflight.experiments]\na = { command = "python a.py", comand = "x" }',
            "[tool.trainmedic.preflight.experiments.a] has an unknown key 'comand'; did you mean 'command'?",
        ),
        (
            '[tool.trainmedic.preflight]\nbudget = "2m"',
            'is empty; add one, e.g. toy = "python train.py --steps 5"',
        ),
        ("[tool.trainmedic.preflight.experiments]\n", "[tool.trainmedic.preflight.experiments] in"),
        ("[tool.trainmedic.preflight\n", "is not valid TOML"),
    ],
)
def test_bad_declarations_name_the_key_the_value_and_the_fix(project, table, expected):
    project.pyproject(table)
    with pytest.raises(PreflightError) as info:
        project.settings()
    assert expected in str(info.value)


def test_no_pyproject_and_no_command(project):
    with pytest.raises(PreflightError, match=r"(?s)no pyproject.toml in .* or above it.*--command"):
        load_settings(Overrides(), cwd=project.root)


def test_pyproject_without_the_table(project):
    project.pyproject('[project]\nname = "x"\n')
    with pytest.raises(
        PreflightError,
        match=r"(?s)has no \[tool.trainmedic.preflight\] table.*\[tool.trainmedic.preflight.experiments\]",
    ):
        project.settings()
    assert project.settings(commands=("python a.py",)).root == project.root.resolve()


def test_unknown_name_lists_the_declared_ones(project):
    project.pyproject(FULL)
    with pytest.raises(PreflightError, match=r"no experiment named 'cifar' in .*; declared: toy2d, mnist"):
        project.settings("cifar")


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"budget": "soon"}, "--budget = 'soon': cannot read"),
        ({"device": "gtx9000"}, "--device = 'gtx9000': unknown GPU"),
        ({"session_limit": "-1h"}, "--session-limit = '-1h'"),
        ({"commands": ("   ",)}, "--command = '   ': expected a command line"),
        ({"project": Path("/no/such/folder")}, "--project /no/such/folder: no such folder"),
    ],
)
def test_bad_command_line_values(project, overrides, expected):
    project.pyproject(FULL)
    with pytest.raises(PreflightError) as info:
        project.settings(**overrides)
    assert expected in str(info.value)


def test_python_310_without_tomli_names_the_install(project, monkeypatch):
    project.pyproject(FULL)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(PreflightError, match="needs the package tomli: pip install tomli"):
        project.settings()


def test_python_310_with_tomli(project, monkeypatch):
    import tomllib

    project.pyproject(FULL)
    monkeypatch.setitem(sys.modules, "tomli", tomllib)  # tomli is tomllib's origin: same API
    monkeypatch.setitem(sys.modules, "tomllib", None)
    assert [e.name for e in project.settings().experiments] == ["toy2d", "mnist"]


def test_python_becomes_this_interpreter():
    assert child_argv("python train.py --x 'a b'") == [sys.executable, "train.py", "--x", "a b"]
    assert child_argv("python3 -m pkg.train")[0] == sys.executable
    assert child_argv("bash run.sh") == ["bash", "run.sh"]


def test_child_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/user/lib")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("TRAINMEDIC_PREFLIGHT_PID", "123")  # a preflight started from inside a preflight child
    env = child_env(tmp_path / "d", tmp_path, {"DATA": "tiny"}, hold_at=4)
    site = Path(env["PYTHONPATH"].split(":")[0])
    assert (site / "sitecustomize.py").is_file()
    assert sorted(p.name for p in site.glob("*.py")) == [
        "__init__.py",
        "sitecustomize.py",
    ]  # nothing to shadow user modules
    assert env["PYTHONPATH"].endswith(":/user/lib")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["PYTHONUNBUFFERED"] == "1" and env["DATA"] == "tiny"
    assert env["TRAINMEDIC_PREFLIGHT_DIR"] == str(tmp_path / "d")
    assert env["TRAINMEDIC_PREFLIGHT_HOLD_AT"] == "4"
    assert "TRAINMEDIC_PREFLIGHT_PID" not in env


# -- shell syntax: the command runs without a shell --------------------------------------------


@pytest.mark.parametrize(
    "command, message",
    [
        (
            "FOO=1 python fail.py",
            "command = 'FOO=1 python fail.py': 'FOO=1' is a shell variable assignment, but the command runs without a "
            "shell (it would look for a program named FOO=...); set it in the experiment's table: "
            'a = { command = "python fail.py", env = { FOO = "1" } }',
        ),
        ("A=x B='y z' python t.py", 'a = { command = "python t.py", env = { A = "x", B = "y z" } }'),
        (
            "cd sub && python x.py",
            "command = 'cd sub && python x.py': '&&' is shell syntax, but the command runs without a shell (the program "
            "would get it as an argument); instead of cd, give the folder (relative to the project root) as cwd: "
            'a = { command = "python x.py", cwd = "sub" }',
        ),
        (
            "python -c 'print(1)' > out.txt",
            "'>' is shell syntax, but the command runs without a shell (the program would get it as an argument); drop "
            "the redirection: the command's stdout and stderr are captured",
        ),
        ("python t.py 2>err.txt", "'2>' is shell syntax"),
        ("python t.py >> log", "'>>' is shell syntax"),
        ("python t.py < in.txt", "'<' is shell syntax"),
        (
            "python a.py || python b.py",
            "'||' is shell syntax, but the command runs without a shell (the program would "
            'get it as an argument); put the steps in a script and run that, e.g. command = "sh run.sh"',
        ),
        ("python a.py | tee log", "'|' is shell syntax"),
        ("python a.py; python b.py", "';' is shell syntax"),
        ("python a.py &", "'&' is shell syntax"),
    ],
)
def test_shell_syntax_in_a_command_is_refused_with_the_key_that_does_it(project, command, message):
    project.pyproject(f"[tool.trainmedic.preflight.experiments]\na = {{ command = {json.dumps(command)} }}\n")
    with pytest.raises(PreflightError) as info:
        project.settings()
    assert message in str(info.value)
    assert str(info.value).startswith("[tool.trainmedic.preflight.experiments.a] command = ")


def test_shell_syntax_on_the_command_line_says_how_to_do_it_there(project):
    with pytest.raises(PreflightError) as info:
        project.settings(commands=("FOO=1 python fail.py",))
    assert str(info.value).endswith(
        "set it for trainmedic itself (its environment reaches the command): FOO=1 trainmedic preflight --command "
        "'python fail.py', or declare the experiment in pyproject.toml with env = { FOO = \"1\" }"
    )
    with pytest.raises(PreflightError) as info:
        project.settings(commands=("cd sub && python x.py --n 3",))
    assert str(info.value).endswith(
        "run it from that folder (a --command runs where trainmedic is started): cd sub && trainmedic preflight "
        "--command 'python x.py --n 3', or declare the experiment in pyproject.toml with cwd = \"sub\""
    )


@pytest.mark.parametrize(
    "command",
    [
        "python -c 'import sys; print(1 > 0 and 2 | 3)'",  # quoted: the program's own text
        'python t.py --sep ";" --expr "a&&b"',
        r"python t.py --x a\;b",
        "python t.py --lr=0.1 --name=FOO=1",  # an assignment after the program is its argument
        "env FOO=1 python t.py",  # env(1) is a program: no shell needed
    ],
)
def test_quoted_or_escaped_operators_and_later_assignments_are_arguments(project, command):
    (experiment,) = project.settings(commands=(command,)).experiments
    assert experiment.command == command


def test_cwd_is_a_folder_relative_to_the_project_root(project):
    (project.root / "sub").mkdir()
    project.pyproject(
        '[tool.trainmedic.preflight.experiments]\na = { command = "python x.py", cwd = "sub" }\n'
    )
    (experiment,) = project.settings().experiments
    assert experiment.cwd == (project.root / "sub").resolve()
    for bad, message in [
        ("nope", "cwd = 'nope': no folder "),
        ("/tmp", "cwd = '/tmp': expected a folder relative to the project root"),
    ]:
        project.pyproject(
            f'[tool.trainmedic.preflight.experiments]\na = {{ command = "python x.py", cwd = "{bad}" }}\n'
        )
        with pytest.raises(PreflightError, match=re.escape(message)):
            project.settings()
