from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from warm_kit import run_trainmedic


class Trainmedic:
    """Runs the real command in a child process, as a user's shell would.

    The child is forked from a warm interpreter (tests/warm_kit.py: torch already imported, ~6 s
    of CPU less per training run); ``fresh=True`` starts a new interpreter, for the tests of
    start-up itself.
    """

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def script(self, name: str, body: str) -> Path:
        path = self.cwd / name
        path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
        return path

    def __call__(self, *args: str, timeout: float = 120, fresh: bool = False) -> subprocess.CompletedProcess:
        env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
        return run_trainmedic(list(args), cwd=self.cwd, env=env, timeout=timeout, fresh=fresh)

    def report(self, name: str = "report.json") -> dict:
        return json.loads((self.cwd / name).read_text(encoding="utf-8"))


@pytest.fixture
def tm(tmp_path: Path) -> Trainmedic:
    return Trainmedic(tmp_path)
