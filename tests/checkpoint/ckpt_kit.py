"""Helpers for the checkpoint tests: start child scripts, read their progress, inspect checkpoints.

Synchronisation with a child is always "poll its progress file until a line appears, with a
deadline" (never a sleep standing in for a condition); a child that dies early fails the wait
with its stderr.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHILDREN = Path(__file__).parent / "children"
CKPT_NAME = re.compile(r"^(\d{6})-step-(\d+)(?:-(.+))?$")
WAIT_S = 60.0  # generous: a loaded CI machine; a healthy run takes a fraction of this


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMEDIC_PREFLIGHT")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


class Child:
    """A child script running as a real process, its stdout/stderr going to files in ``workdir``."""

    def __init__(
        self, script: str, args: list[Any], workdir: Path, tag: str, env: dict[str, str] | None = None
    ):
        self.progress = workdir / f"{tag}.progress"
        self.stdout_path = workdir / f"{tag}.stdout"
        self.stderr_path = workdir / f"{tag}.stderr"
        argv = [str(a) for a in args]
        if "--progress" not in argv:
            argv += ["--progress", str(self.progress)]
        self.proc = self._start(script, argv, workdir, env)

    def _start(self, script: str, argv: list[str], workdir: Path, env: dict[str, str] | None) -> Any:
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            cmd = [sys.executable, str(CHILDREN / script), *argv]
            return subprocess.Popen(cmd, stdout=out, stderr=err, env=env or child_env(), cwd=workdir)

    # -- progress ---------------------------------------------------------------------------------

    def lines(self) -> list[list[str]]:
        """Whole lines written so far, split into words (a torn last line is left out)."""
        try:
            text = self.progress.read_text()
        except FileNotFoundError:
            return []
        return [line.split(" ") for line in text.split("\n")[:-1]]

    def find(self, tag: str) -> list[list[str]]:
        return [parts for parts in self.lines() if parts[0] == tag]

    def wait_for(
        self, predicate: Callable[[list[str]], bool], what: str, timeout: float = WAIT_S
    ) -> list[str]:
        """Poll the progress file until a line satisfies ``predicate``; fail if the child exits first."""
        end = time.monotonic() + timeout
        while True:
            for parts in self.lines():
                if predicate(parts):
                    return parts
            if self.proc.poll() is not None:
                # It may have written the line just before exiting.
                for parts in self.lines():
                    if predicate(parts):
                        return parts
                raise AssertionError(
                    f"child exited with {self.proc.returncode} before {what}:\n{self.describe()}"
                )
            if time.monotonic() > end:
                self.kill()
                raise AssertionError(f"no {what} within {timeout:.0f} s:\n{self.describe()}")
            time.sleep(0.002)  # polling interval of the wait loop above

    def wait_tag(self, tag: str, timeout: float = WAIT_S) -> list[str]:
        return self.wait_for(lambda parts: parts[0] == tag, f"'{tag}' line", timeout)

    # -- ending -----------------------------------------------------------------------------------

    def kill(self, sig: int = signal.SIGKILL) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=WAIT_S)

    def finish(self, timeout: float = WAIT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"child still running after {timeout:.0f} s:\n{self.describe()}") from None

    def expect_success(self, timeout: float = WAIT_S) -> None:
        code = self.finish(timeout)
        assert code == 0, f"child exited with {code}:\n{self.describe()}"

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def describe(self) -> str:
        progress = self.progress.read_text() if self.progress.exists() else "(none)"
        return f"--- progress ---\n{progress[-3000:]}\n--- stderr ---\n{self.stderr[-6000:]}"


class _Forked:
    """The Popen calls Child uses, over a multiprocessing.Process."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid = process.pid

    def poll(self) -> int | None:
        return self._process.exitcode

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return self._process.exitcode


_FORK_SERVER: Any = None
# Imported once by the fork server; torch._dynamo is what the first optimizer of a process
# imports (~1.5 s of the ~3 s a torch child otherwise spends before its first step). Names only
# from site-packages: Python 3.11's fork server ignores the parent's sys.path when preloading.
PRELOAD = [
    "numpy",
    "torch",
    "torch._dynamo",
    "torch.optim",
    "torchdata.stateful_dataloader",
    "trainmedic.data",
    "trainmedic.checkpoint",
]


def fork_server() -> Any:
    """A multiprocessing context whose fork server has torch & co. preloaded (see PRELOAD)."""
    global _FORK_SERVER
    if _FORK_SERVER is None:
        import multiprocessing

        if str(CHILDREN) not in sys.path:
            sys.path.insert(0, str(CHILDREN))  # a forked run takes the parent's sys.path: childkit, forked
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _FORK_SERVER = context
    return _FORK_SERVER


class ForkedChild(Child):
    """A child script's main() run in a process forked from the preloaded fork server.

    A forked run is a real, separate process (SIGKILLed for real; its successor restores from
    disk only); it just does not pay for importing torch again.
    """

    def _start(self, script: str, argv: list[str], workdir: Path, env: dict[str, str] | None) -> Any:
        context = fork_server()
        from forked import run

        module = script.removesuffix(".py")
        process = context.Process(
            target=run, args=(module, argv, str(self.stdout_path), str(self.stderr_path), str(workdir))
        )
        process.start()
        return _Forked(process)


def run_child(
    script: str, args: list[Any], workdir: Path, tag: str, timeout: float = WAIT_S, **kw: Any
) -> Child:
    child = Child(script, args, workdir, tag, **kw)
    child.finish(timeout)
    return child


# -- the checkpoint directory ---------------------------------------------------------------------


def checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (a published name with a manifest), oldest first by sequence number."""
    if not directory.exists():
        return []
    found = [p for p in directory.iterdir() if CKPT_NAME.match(p.name) and (p / "manifest.json").is_file()]
    return sorted(found, key=lambda p: int(CKPT_NAME.match(p.name).group(1)))


def published(directory: Path) -> list[Path]:
    """Every entry with a checkpoint name, complete or not (a deletion may have been cut short)."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.iterdir() if CKPT_NAME.match(p.name))


def temp_entries(directory: Path) -> list[Path]:
    """What interrupted saves and deletions leave: hidden ``.tmp-``/``.trash-`` entries."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith((".tmp", ".trash")))


def step_of(path: Path | str) -> int:
    return int(CKPT_NAME.match(Path(path).name).group(2))


def phase_of(path: Path | str) -> str | None:
    return CKPT_NAME.match(Path(path).name).group(3)


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Bit-identical: tensors with torch.equal (and the same dtype), arrays with array_equal."""
    import numpy as np

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{where}: tensor vs {type(b).__name__}"
        assert a.dtype == b.dtype and a.shape == b.shape, (
            f"{where}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        )
        assert torch.equal(a, b), (
            f"{where}: tensors differ (max abs diff {(a.double() - b.double()).abs().max().item()})"
        )
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, f"{where}: array vs {type(b).__name__}"
        assert np.array_equal(a, b), f"{where}: arrays differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (
            f"{where}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        )
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: {a!r:.200} vs {b!r:.200}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r:.200} != {b!r:.200}"
