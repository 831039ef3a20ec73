from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from trainmedic.preflight import Overrides, PreflightReport, load_settings, run_preflight
from trainmedic.preflight.configs import ConfigTracker


class Project:
    """A throwaway user project: files on disk, pyproject.toml, and preflight run over it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    def pyproject(self, body: str) -> Path:
        return self.write("pyproject.toml", body)

    def settings(self, *names: str, **overrides):
        return load_settings(Overrides(names=names, **overrides), cwd=self.root)

    def run(self, *names: str, **overrides) -> PreflightReport:
        return run_preflight(self.settings(*names, **overrides))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def tracker(tmp_path):
    tracker = ConfigTracker(str(tmp_path))
    tracker.install()
    yield tracker
    tracker.uninstall()
