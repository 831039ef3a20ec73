"""Run ``python -m trainmedic ...`` (or any module or script) in a process forked from a warm interpreter.

A fresh interpreter spends about 6 s of a 2-vCPU VM's CPU before a training script's first step:
``import torch`` (2.5-3.5 s) and ``torch._dynamo`` (about 3 s, which every ``torch.optim``
optimizer imports on construction). Tests that assert what a command does after that — its
verdicts, reports, exit codes, messages — run it in a child forked from one interpreter per test
worker that has imported torch, torch._dynamo and numpy and nothing else. The child is a real
process: its own pid, process group, working directory, environment, argv and standard streams,
and it exits through the interpreter's normal shutdown (atexit handlers, flushed files).

trainmedic itself is imported fresh in every child, so each run sees the code as it is on disk.
A request whose environment changes a variable read when torch or Python starts (thread counts,
CUDA, ``PYTHON*`` but PYTHONPATH) runs in a fresh interpreter instead. Tests of start-up itself
(imports, a script's own ``import torch`` as ``trainmedic run`` sees it, the demo's first run)
pass ``fresh=True`` or call ``subprocess`` directly, and so do tests that signal a running child.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: Read when torch, its thread pools or the interpreter start: a different value needs a fresh one.
STARTUP_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "CUDA", "TORCH", "PYTORCH", "PYTHON", "LD_")

#: Startup variables the warm child applies itself (PYTHONPATH) or that only change when a write
#: lands (PYTHONUNBUFFERED: every warm child is unbuffered).
HANDLED = {"PYTHONPATH", "PYTHONUNBUFFERED"}

#: The warm interpreter: imports, then forks one child per request line on stdin. The parent
#: answers with the child's pid, then with its exit status once it is reaped.
SERVER = r"""
import atexit, gc, json, os, runpy, sys, threading, traceback
import numpy, torch, torch._dynamo  # noqa: F401  the cost every training child pays first

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
for fd, path, flags in (
    (0, os.devnull, os.O_RDONLY),
    (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
):
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
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            text=True,
            bufsize=1,
        )
        atexit.register(self.close)

    def fits(self, env: dict[str, str]) -> bool:
        keys = {k for k in set(env) | set(self.env) if k.startswith(STARTUP_PREFIXES)} - HANDLED
        return self.proc.poll() is None and all(env.get(k) == self.env.get(k) for k in keys)

    def run(
        self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        with self.lock, tempfile.TemporaryDirectory(prefix="trainmedic-warm-") as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = json.loads(self.proc.stdout.readline())["pid"]
            status = self._wait(pid, timeout)
            cmd = [sys.executable, *argv]
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
            if status is None:
                raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
            return subprocess.CompletedProcess(cmd, status, stdout, stderr)

    def _wait(self, pid: int, timeout: float) -> int | None:
        """The child's exit code; None, after killing its process group, when it overran."""
        answer: list[str] = []
        reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reader.join()
            return None
        return json.loads(answer[0])["status"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


_WARM: _Warm | None = None


def run_python(
    argv: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float, fresh: bool = False
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, *argv], capture_output=True, text=True)``, forked from the warm
    interpreter unless ``fresh`` or ``env`` asks for a new one. ``argv``: ``-m module ...`` or
    ``script.py ...``."""
    global _WARM
    if not fresh and (_WARM is None or _WARM.proc.poll() is not None):
        _WARM = _Warm(dict(env))
    if fresh or not _WARM.fits(env):
        return subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    return _WARM.run(list(argv), Path(cwd), dict(env), timeout)


def run_trainmedic(
    args: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float, fresh: bool = False
) -> subprocess.CompletedProcess:
    """``python -m trainmedic *args``, as :func:`run_python` runs it."""
    return run_python(["-m", "trainmedic", *args], cwd=cwd, env=env, timeout=timeout, fresh=fresh)
