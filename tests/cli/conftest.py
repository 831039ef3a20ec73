from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


class Trainmedic:
    """Runs the real command in a child process, as a user's shell would."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def script(self, name: str, body: str) -> Path:
        path = self.cwd / name
        path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
        return path

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = {**os.environ, "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
        return subprocess.run(
            [sys.executable, "-m", "trainmedic", *args],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def report(self, name: str = "report.json") -> dict:
        return json.loads((self.cwd / name).read_text(encoding="utf-8"))


@pytest.fixture
def tm(tmp_path: Path) -> Trainmedic:
    return Trainmedic(tmp_path)
