"""The one "is this the user's file?" check that run, plan, batch, lint and preflight share."""

from __future__ import annotations

import os
import sys

import trainmedic.units
from trainmedic.userfiles import UserFiles, shown_path


def write(path, text="x = 1\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_the_projects_files_are_the_users_and_installed_code_is_not(tmp_path):
    user = UserFiles([tmp_path])
    assert write(tmp_path / "train.py") in user
    assert write(tmp_path / ".venv" / "lib" / "site-packages" / "lib.py") not in user
    assert write(tmp_path / "vendor" / "dist-packages" / "lib.py") not in user
    assert os.__file__ not in user  # the standard library
    assert trainmedic.units.__file__ not in user  # trainmedic itself
    assert "<string>" not in user and "" not in user


def test_a_file_outside_every_root_counts_only_where_asked(tmp_path):
    helper = write(tmp_path / "elsewhere" / "helpers.py")
    project = tmp_path / "project"
    project.mkdir()
    assert helper not in UserFiles([project])  # preflight: the project it was pointed at
    assert helper in UserFiles([project], anywhere=True)  # run: a module on PYTHONPATH


def test_a_project_inside_the_interpreters_prefix_is_still_the_users(tmp_path, monkeypatch):
    # The system Python in a container: sys.prefix is /usr and the project is /usr/src/app.
    prefix = tmp_path / "usr"
    script = write(prefix / "src" / "app" / "train.py")
    for name in ("prefix", "base_prefix", "exec_prefix"):
        monkeypatch.setattr(sys, name, str(prefix))
    assert script in UserFiles([prefix / "src" / "app"], anywhere=True)
    assert script not in UserFiles([tmp_path / "other"], anywhere=True)  # another project: installed code


def test_paths_are_shown_as_a_user_types_them(tmp_path):
    inside = write(tmp_path / "pkg" / "train.py")
    assert shown_path(inside, tmp_path) == os.path.join("pkg", "train.py")
    outside = write(tmp_path.parent / f"{tmp_path.name}-other.py")
    assert shown_path(outside, tmp_path) == outside


def test_another_interpreters_library_is_not_the_users(tmp_path):
    # trainmedic attach reads a process that may run another Python: its stdlib lies elsewhere.
    stdlib = write(tmp_path / "opt" / "python3.12" / "lib" / "python3.12" / "threading.py")
    project = tmp_path / "project"
    project.mkdir()
    assert stdlib in UserFiles([project], anywhere=True)
    assert stdlib not in UserFiles(
        [project], anywhere=True, libraries=[str(tmp_path / "opt" / "python3.12" / "lib")]
    )
    assert write(project / "train.py") in UserFiles(
        [project], anywhere=True, libraries=[str(tmp_path / "opt" / "python3.12" / "lib")]
    )
