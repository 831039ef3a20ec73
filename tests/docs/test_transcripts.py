"""Every ``console`` block of the docs and the README runs, and prints what the page shows.

The page's numbers are one run's; the test holds the words, the categories, the lines of the
user's code and the order (``markdown_blocks.matches``). A command that now prints something
else fails here, with both texts."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from markdown_blocks import ROOT, Block, blocks, first_mismatch, matches, steps
from proc_kit import kill_tree
from warm_kit import run_python

TRANSCRIPTS = blocks("console")
#: What a terminal of the docs' width would be; the report wraps at it.
DOCS_ENV = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}

pytestmark = pytest.mark.slow


def test_every_transcript_says_where_it_runs():
    missing = [block.name for block in TRANSCRIPTS if block.cwd is None]
    assert not missing, f"console blocks without a `<!-- cwd: docs/examples/... -->` line: {missing}"
    for block in TRANSCRIPTS:
        assert (ROOT / block.cwd).is_dir(), f"{block.name}: {block.cwd} is not a folder"


@pytest.mark.parametrize("block", TRANSCRIPTS, ids=[block.name for block in TRANSCRIPTS])
def test_the_transcript_is_what_the_command_prints(block: Block):
    # A short folder: a report folds a path longer than its width mid-word, which no page can show.
    with tempfile.TemporaryDirectory(prefix="tm-") as scratch:
        folder = Path(scratch, "example")
        shutil.copytree(ROOT / block.cwd, folder)
        _run(block, folder)


def _run(block: Block, folder: Path) -> None:
    env = {**os.environ, **DOCS_ENV}
    background: list[subprocess.Popen] = []
    try:
        for step in steps(block):
            command = step.command.replace("$!", str(background[-1].pid)) if background else step.command
            words = shlex.split(command)
            if words[-1] == "&":
                background.append(_start(block, words[:-1], step.want, folder, env))
                continue
            if words[0] == "kill":
                background[-1].terminate()
                continue
            assert words[0] in ("trainmedic", "python"), f"{block.name}: cannot run {step.command!r}"
            argv = ["-m", "trainmedic", *words[1:]] if words[0] == "trainmedic" else words[1:]
            done = run_python(argv, cwd=folder, env=env, timeout=180, merged=True)
            assert "Traceback (most recent call last)" not in done.stdout, done.stdout
            assert matches(step.want, done.stdout), (
                f"{block.name}: `{step.command}` printed\n{done.stdout}\nwhere the page shows\n{step.want}\n"
                f"first line of the page not matched: {first_mismatch(step.want, done.stdout)!r}"
            )
    finally:
        for job in background:
            kill_tree(job.pid)
            job.wait(timeout=30)


def _start(block: Block, words: list[str], want: str, folder: Path, env: dict[str, str]) -> subprocess.Popen:
    """A job started in the background (for `trainmedic attach $!`): the lines the page shows
    after it are its first lines, and it counts as started once it has printed them."""
    assert words[0] == "python", f"{block.name}: only `python ... &` runs in the background"
    # argv[0] stays "python", as a shell would start it: the report shows the job's command line
    job = subprocess.Popen(
        words, executable=sys.executable, cwd=folder, env=env, stdout=subprocess.PIPE, text=True
    )
    first = [job.stdout.readline() for _ in want.splitlines()]
    assert matches(want, "".join(first)), f"{block.name}: the job printed {first!r}, the page {want!r}"
    return job
