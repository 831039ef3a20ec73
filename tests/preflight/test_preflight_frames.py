"""Reading tracebacks and stack dumps back in the parent, and telling the user's frames apart."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from trainmedic.preflight.frames import (
    Frame,
    innermost_user,
    main_thread_frames,
    parse_traceback,
    resolve,
    stuck_where,
)
from trainmedic.userfiles import UserFiles, shown_path

CHAINED = """\
loading config
Traceback (most recent call last):
  File "/proj/data.py", line 3, in load
    return table[name]
           ~~~~~^^^^^^
KeyError: 'mnist'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/proj/train.py", line 9, in <module>
    main()
  File "/proj/train.py", line 6, in main
    loader = data.load("mnist")
             ^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/lib/core.py", line 40, in load
    raise ValueError(f"unknown dataset {name!r}")
ValueError: unknown dataset 'mnist'
hint: run prepare.py first
"""


def test_the_last_traceback_its_frames_and_its_error_line():
    failure = parse_traceback(CHAINED)
    assert failure.error == "ValueError: unknown dataset 'mnist'"
    assert [(f.path, f.line, f.function) for f in failure.frames] == [
        ("/proj/train.py", 9, "<module>"),
        ("/proj/train.py", 6, "main"),
        ("/venv/lib/python3.11/site-packages/lib/core.py", 40, "load"),
    ]
    assert parse_traceback("just some output\n") is None


def test_a_syntax_error_reports_its_exception_line():
    text = 'Traceback (most recent call last):\n  File "/proj/t.py", line 2\n    x = = 1\n        ^\nSyntaxError: invalid syntax\n'
    # No ", in name" part: not a frame; the exception line is still found.
    assert parse_traceback(text).error == "SyntaxError: invalid syntax"


def test_user_files_exclude_the_interpreter_packages_venvs_and_trainmedic(tmp_path):
    user = UserFiles([tmp_path])
    assert str(tmp_path / "train.py") in user
    assert str(tmp_path / "pkg" / "model.py") in user
    assert str(tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "lib.py") not in user
    assert str(tmp_path / "venv" / "lib" / "dist-packages" / "lib.py") not in user
    assert "/elsewhere/train.py" not in user  # not under the project root
    assert "<string>" not in user and "" not in user
    assert str(Path(sysconfig.get_paths()["stdlib"]) / "json" / "__init__.py") not in user
    import trainmedic

    assert trainmedic.__file__ not in UserFiles([Path(trainmedic.__file__).parents[2]])


def test_a_project_under_the_interpreters_prefix_is_still_the_users(tmp_path, monkeypatch):
    # A container with the system Python: sys.prefix = /usr, the project in /usr/src/app.
    prefix = tmp_path / "usr"
    app = prefix / "src" / "app"
    (app / "pkg").mkdir(parents=True)
    for name in ("prefix", "base_prefix", "exec_prefix"):
        monkeypatch.setattr(sys, name, str(prefix))
    user = UserFiles([app])
    assert str(app / "train.py") in user and str(app / "pkg" / "model.py") in user
    assert str(prefix / "lib" / "tool.py") not in user  # under the prefix, outside the project
    assert str(app / ".venv" / "lib" / "python3.11" / "site-packages" / "lib.py") not in user
    # A venv inside the project is the interpreter's prefix, not the user's code.
    monkeypatch.setattr(sys, "prefix", str(app / ".venv"))
    assert str(app / ".venv" / "lib" / "tool.py") not in UserFiles([app])


def test_innermost_user_frame_and_relative_paths(tmp_path):
    frames = resolve(
        [
            Frame("train.py", 9, "<module>"),
            Frame("pkg/model.py", 4, "forward"),
            Frame(sys.modules["json"].__file__, 1, "loads"),
        ],
        tmp_path,
    )
    assert innermost_user(frames, UserFiles([tmp_path])) == Frame(
        str(tmp_path / "pkg/model.py"), 4, "forward"
    )
    assert innermost_user(frames[2:], UserFiles([tmp_path])) is None
    assert shown_path(str(tmp_path / "pkg/model.py"), tmp_path) == "pkg/model.py"
    assert shown_path("/elsewhere/x.py", tmp_path) == "/elsewhere/x.py"


def test_main_thread_from_the_python_dump(tmp_path):
    script = str(tmp_path / "train.py")
    stack = f"""Main thread (most recent call last):
  File "{script}", line 20, in <module>
  File "{script}", line 17, in train_phase
Thread 140 (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 995, in _bootstrap
"""
    frames = main_thread_frames(stack, "", UserFiles([tmp_path]))
    assert [(f.line, f.function) for f in frames] == [(20, "<module>"), (17, "train_phase")]


def test_main_thread_from_faulthandler_when_python_could_not_answer(tmp_path):
    script = str(tmp_path / "train.py")
    native = f"""Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f00 (most recent call first):
  File "{script}", line 5 in total
  File "{script}", line 8 in <module>
"""
    frames = main_thread_frames("", native, UserFiles([tmp_path]))
    assert [(f.line, f.function) for f in frames] == [(8, "<module>"), (5, "total")]  # outermost first
    assert main_thread_frames("", "", UserFiles([tmp_path])) == []


def test_the_loop_around_a_stuck_line(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(
        "def phase(n):\n    for i in range(n):\n        while True:\n            step()\n    done()\n"
    )
    where = stuck_where(Frame(str(path), 4, "phase"))
    assert (where.frame.source, where.loop_line, where.loop_source) == ("step()", 3, "while True:")
    assert stuck_where(Frame(str(path), 5, "phase")).loop_line is None
    assert stuck_where(Frame(str(tmp_path / "gone.py"), 5, "phase")).loop_line is None
