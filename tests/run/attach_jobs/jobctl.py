"""What every job in this folder shares: its command line, the ``ready`` handshake, how it stops.

The jobs are real training processes that ``tests/run/test_attach.py`` reads from outside with
``trainmedic attach``. The test starts them all at once (their ``import torch`` overlaps), and
each one, once past its warm-up steps, prints ``ready`` and waits for a line on stdin before it
goes on: a waiting job takes no CPU from the one being sampled, and the sampler meets a job that
is past imports and first-step allocations. After that a job trains until the stop file exists
(checked every step) or ``--steps`` steps ran, prints one ``result`` line and exits 0;
``--cap-s`` (counted from the handshake) ends it with an error if nothing stops it, so a job
never outlives a test that failed.
"""

import argparse
import os
import sys
import threading
import time


class Job:
    def __init__(self, name):
        parser = argparse.ArgumentParser(prog=name)
        parser.add_argument("--stop", required=True, help="stop at the first step after this file exists")
        parser.add_argument("--steps", type=int, default=None, help="stop after this many steps in all")
        parser.add_argument("--warmup", type=int, default=3, help="steps before 'ready' is printed")
        parser.add_argument("--cap-s", type=float, default=120.0, help="exit with an error after this long")
        self.args = parser.parse_args()
        self.name = name
        # The cap counts from the handshake on: a job waiting for it takes no CPU, and ends when the
        # test closes its stdin.
        self.deadline = time.monotonic() + self.args.cap_s

    def running(self, step):
        """Whether step ``step`` (counted from 0) should run; the handshake comes before step ``--warmup``."""
        if step == self.args.warmup:
            print("ready", flush=True)
            # Blocks without using the CPU until the test lets the job go on. End of file means the
            # test is gone (it closed the pipe, or died): nothing to go on for.
            if not sys.stdin.readline():
                os._exit(0)  # as in finish(): nothing to write or close yet
            self.deadline = time.monotonic() + self.args.cap_s
        if self.args.steps is not None and step >= self.args.steps:
            return False
        if os.path.exists(self.args.stop):
            return False
        if time.monotonic() > self.deadline:
            sys.exit(f"{self.name}: still running after {self.args.cap_s:g} s and nobody stopped it")
        return True

    def on_stop(self, release):
        """Call ``release()`` once the stop file exists or the cap has passed, from a thread of its own:
        for a job blocked where its loop cannot look for the stop file."""

        def watch():
            while not os.path.exists(self.args.stop) and time.monotonic() < self.deadline:
                time.sleep(0.05)
            release()

        threading.Thread(target=watch, name="stop-watch", daemon=True).start()

    def finish(self, **values):
        """Print the job's last line (what it computed, for a test to compare between runs) and exit 0."""
        print("result " + " ".join(f"{key}={value}" for key, value in values.items()), flush=True)
        # Straight out: the interpreter's own shutdown after torch (its atexit handlers, the
        # teardown of thousands of modules) takes seconds on a busy 2-core machine, and a job
        # here has nothing left to write or close.
        os._exit(0)
