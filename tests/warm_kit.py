"""Run ``python -m trainmedic ...`` (or any module or script) in a process forked from a warm interpreter.

A fresh interpreter spends about 6 s of a 2-vCPU VM's CPU before a training script's first step:
``import torch`` (2.5-3.5 s) and ``torch._dynamo`` (about 3 s, which every ``torch.optim``
optimizer imports on construction). Tests that assert what a command does after that — its
verdicts, reports, exit codes, messages — run it in a child forked from one interpreter per test
worker that has imported torch, torch._dynamo and numpy. The child is a real
process: its own pid, process group, working directory, environment, argv and standard streams,
and it exits through the interpreter's normal shutdown (atexit handlers, flushed files).

The warm interpreter has also imported the modules of trainmedic's CLI and of ``run`` (0.4 s a
child), and runs none of them: each child runs its command from the start, with its own argv,
environment and working directory (trainmedic reads none of those at import time).

The variables read when torch or Python starts (thread counts, CUDA, ``PYTHON*`` but
PYTHONPATH) are the warm interpreter's own: a request with other values is served by one started
with them. Tests of start-up itself (imports, a script's own ``import torch`` as ``trainmedic
run`` sees it, the demo's first run) pass ``fresh=True`` or call ``subprocess`` directly.
:func:`popen_python` starts a child that a test talks to through pipes and signals while it runs.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from proc_kit import kill_tree

#: Read when torch, its thread pools or the interpreter start: other values need a warm interpreter of their own.
STARTUP_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "CUDA", "TORCH", "PYTORCH", "PYTHON", "LD_")

#: Startup variables the warm child applies itself (PYTHONPATH), that only change when a write
#: lands (PYTHONUNBUFFERED: every warm child is unbuffered), or that are read only when used
#: (TORCHINDUCTOR_CACHE_DIR, which torch's compiler sets in the test process the first time it runs).
HANDLED = {"PYTHONPATH", "PYTHONUNBUFFERED", "TORCHINDUCTOR_CACHE_DIR"}

#: The warm interpreter: imports, then forks one child per request line on stdin. The parent
#: answers with the child's pid, then with its exit status once it is reaped.
SERVER = r"""
import atexit, gc, json, os, runpy, sys, threading, traceback
import numpy, torch, torch._dynamo  # noqa: F401  the cost every training child pays first
import trainmedic.cli.main, trainmedic.cli.run  # noqa: F401  the command's modules, loaded and not run

gc.freeze()  # the children's collections leave the warm objects (and their pages) alone

def serve():
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(1), "w", buffering=1)
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            replies.close()
            return request
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.exit(0)

request = serve()
os.setpgid(0, 0)  # its own group: a timeout kills what it started too
# Files, or the named pipes of popen_python() (opened in this order on both ends).
for fd, path, flags in (
    (0, request.get("stdin") or os.devnull, os.O_RDONLY),
    (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
):
    if fd == 2 and path == request["stdout"]:  # 2>&1: one file, one offset, the terminal's order
        os.dup2(1, 2)
        continue
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
argv = request["argv"]
# sys.path as the interpreter starts it: the script's folder (the working one for -m), then PYTHONPATH.
extra = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
if argv[0] == "-m":
    sys.argv = argv[1:]
    sys.path[0:1] = [os.getcwd(), *extra]
else:
    sys.argv = argv
    sys.path[0:1] = [os.path.dirname(os.path.abspath(argv[0])), *extra]
del serve, request, extra
try:
    if argv[0] == "-m":
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(argv[0], run_name="__main__")
    code = 0
except SystemExit as exit:  # as the interpreter reads it: None is 0, a message is printed and 1
    code = 0 if exit.code is None else exit.code
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
except BaseException:
    traceback.print_exc()
    code = 1
# The interpreter's own shutdown, less its module teardown: tearing down torch in a forked child
# writes to every page it shares with the warm parent (1.7 s here), for nothing a test can see.
threading._shutdown()  # what Py_Finalize does first: join the non-daemon threads
atexit._run_exitfuncs()
for stream in (sys.stdout, sys.stderr):
    stream.flush()
os._exit(int(code))
"""


class _Warm:
    """One warm interpreter per test process; requests are served one at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        # Unbuffered always: each stream goes to a file of its own, read once the child has
        # exited, so buffering changes nothing a test sees. PYTHONPATH is each child's own.
        self.env = {k: v for k, v in env.items() if k != "PYTHONPATH"} | {"PYTHONUNBUFFERED": "1"}
        self.lock = threading.Lock()
        #: The child popen() started, until it has been waited for.
        self.active: WarmProcess | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            text=True,
            bufsize=1,
        )
        atexit.register(self.close)

    def run(
        self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float, merged: bool = False
    ) -> subprocess.CompletedProcess:
        self._reclaim()
        with self.lock, tempfile.TemporaryDirectory(prefix="trainmedic-warm-") as folder:
            out = Path(folder, "stdout")
            err = out if merged else Path(folder, "stderr")
            pid = self._fork(
                {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            )
            status = self._wait(pid, timeout)
            cmd = [sys.executable, *argv]
            stdout = out.read_text(errors="replace")
            stderr = "" if merged else err.read_text(errors="replace")
            if status is None:
                raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
            return subprocess.CompletedProcess(cmd, status, stdout, stderr)

    def popen(self, argv: list[str], cwd: Path, env: dict[str, str]) -> WarmProcess:
        """The child started, its standard streams named pipes held open here; the warm
        interpreter serves nothing else until the child has been waited for."""
        self._reclaim()
        self.lock.acquire()
        try:
            folder = tempfile.mkdtemp(prefix="trainmedic-warm-")
            pipes = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
            for path in pipes.values():
                os.mkfifo(path)
            pid = self._fork({"argv": argv, "cwd": str(cwd), "env": env, **pipes})
            # The child opens stdin, stdout, stderr in this order; each open waits for the other end.
            stdin = open(pipes["stdin"], "w", buffering=1)
            stdout, stderr = open(pipes["stdout"]), open(pipes["stderr"])
        except BaseException:
            self.lock.release()
            raise
        self.active = WarmProcess(self, [sys.executable, *argv], pid, stdin, stdout, stderr, folder)
        return self.active

    def _fork(self, request: dict) -> int:
        """Send one request; the pid of the child the warm interpreter forked for it."""
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["pid"]

    def _reclaim(self) -> None:
        """Kill and reap a popen() child that a failed test left running: the interpreter serves
        one child at a time, and the next request would wait for it forever."""
        if self.active is not None:
            kill_tree(self.active.pid)
            self.active.wait(timeout=30)

    def _wait(self, pid: int, timeout: float) -> int | None:
        """The child's exit code; None, after killing it and every process it started, when it overran."""
        answer: list[str] = []
        reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            kill_tree(pid)  # a launcher's workers too, in sessions of their own (torchrun's ranks)
            reader.join()
            return None
        return json.loads(answer[0])["status"]

    def close(self) -> None:
        self._reclaim()
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


class WarmProcess:
    """What tests use of ``subprocess.Popen(..., stdin=PIPE, stdout=PIPE, stderr=PIPE, text=True)``
    for a child of the warm interpreter: its pid (signals go to it directly), its three pipes,
    ``wait``, ``communicate`` and ``returncode``."""

    def __init__(self, warm: _Warm, args: list[str], pid: int, stdin, stdout, stderr, folder: str) -> None:
        self.warm, self.args, self.pid = warm, args, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.folder = folder
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)  # the warm interpreter reaps its children at once
            except ProcessLookupError:
                return self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; past ``timeout`` the child's process group is killed (TimeoutExpired)."""
        if self.returncode is None:
            status = self.warm._wait(self.pid, timeout if timeout is not None else 3600)
            if status is None:
                self._close()
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = status
            self._close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """The rest of stdout and stderr once the child has closed them, then its exit code."""
        if not self.stdin.closed:
            self.stdin.close()
        texts: dict[str, str] = {}
        readers = [
            threading.Thread(target=lambda n=n, f=f: texts.__setitem__(n, f.read()), daemon=True)
            for n, f in (("stdout", self.stdout), ("stderr", self.stderr))
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout)
        if any(reader.is_alive() for reader in readers):
            self.kill()
            self.wait()
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        return texts["stdout"], texts["stderr"]

    def _close(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.warm.active is self:
            self.warm.active = None
            self.warm.lock.release()


#: This process's warm interpreters, by the startup variables they were started with.
_WARM: dict[tuple, _Warm] = {}
#: At most this many at once: a test process whose startup variables change keeps no stale ones.
_MAX_WARM = 2


def run_python(
    argv: list[str],
    *,
    cwd: Path | str,
    env: dict[str, str],
    timeout: float,
    fresh: bool = False,
    merged: bool = False,
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, *argv], capture_output=True, text=True)``, forked from the warm
    interpreter started with ``env``'s startup variables, or in a new one when ``fresh``.
    ``argv``: ``-m module ...`` or ``script.py ...``. ``merged``: stderr goes where stdout does
    (``2>&1``), in the order a terminal shows them; ``stderr`` is then empty."""
    if fresh:
        return subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
        )
    return _warm_for(env).run(list(argv), Path(cwd), dict(env), timeout, merged=merged)


def _warm_for(env: dict[str, str]) -> _Warm:
    """The warm interpreter started with ``env``'s startup variables (started on first use)."""
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and k not in HANDLED))
    warm = _WARM.get(key)
    if warm is not None and warm.proc.poll() is not None:
        del _WARM[key]
        warm = None
    if warm is None:
        while len(_WARM) >= _MAX_WARM:
            _WARM.pop(next(iter(_WARM))).close()
        warm = _WARM[key] = _Warm(dict(env))
    return warm


def popen_python(argv: list[str], *, cwd: Path | str, env: dict[str, str]) -> WarmProcess:
    """``subprocess.Popen([python, *argv], stdin=PIPE, stdout=PIPE, stderr=PIPE, text=True)``,
    forked from the warm interpreter as :func:`run_python` runs it."""
    return _warm_for(env).popen(list(argv), Path(cwd), dict(env))


def popen_trainmedic(args: list[str], *, cwd: Path | str, env: dict[str, str]) -> WarmProcess:
    """``python -m trainmedic *args``, as :func:`popen_python` starts it."""
    return popen_python(["-m", "trainmedic", *args], cwd=cwd, env=env)


def run_trainmedic(
    args: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float, fresh: bool = False
) -> subprocess.CompletedProcess:
    """``python -m trainmedic *args``, as :func:`run_python` runs it."""
    return run_python(["-m", "trainmedic", *args], cwd=cwd, env=env, timeout=timeout, fresh=fresh)
