"""Reading another process's stacks with py-spy: its speedscope file, its error messages, and a
real recording of a real Python child.

The speedscope documents are written here in the shape py-spy 0.4 writes them; the live tests run
the installed py-spy against a child this test starts, so a change of py-spy's output shows up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from trainmedic.errors import AttachError
from trainmedic.run.probe import pyspy
from trainmedic.run.probe.pyspy import PyFrame

SCRIPT = "/home/u/project/train.py"
LINEAR = "/home/u/.venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"

#: A child blocked in a named function: every stack read from it has ``wait_here`` innermost, at
#: the sleep's line. Sleeping, not spinning: the VM has two cores and the test samples it.
CHILD = "import time\ndef wait_here():\n    while True:\n        time.sleep(0.05)\nprint('ready', flush=True)\nwait_here()\n"
SLEEP_LINE, CALL_LINE = 4, 6


def _document(*profiles: dict, frames: list[dict]) -> dict:
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "profiles": list(profiles),
        "shared": {"frames": frames},
        "activeProfileIndex": 0,
        "exporter": "py-spy@0.4.2",
        "name": "py-spy profile",
    }


def _profile(name: str, samples: list[list[int]]) -> dict:
    return {
        "type": "sampled",
        "name": name,
        "unit": "seconds",
        "startValue": 0,
        "endValue": 0.01 * len(samples),
        "samples": samples,
        "weights": [0.01] * len(samples),
    }


def _frame(name: str, file: str, line: int) -> dict:
    return {"name": name, "file": file, "line": line, "col": None}


FRAMES = [
    _frame("<module>", SCRIPT, 40),  # 0
    _frame("main", SCRIPT, 22),  # 1
    _frame("forward", LINEAR, 125),  # 2
    _frame("main", SCRIPT, 23),  # 3
    # --subprocesses roots every stack at its process, as a frame with no file (its name holds
    # the command line, newlines and all).
    _frame('process 12:"python -c \nimport time\nwait()"', "", 0),  # 4
]


def test_samples_keep_their_order_and_list_the_innermost_frame_first():
    document = _document(
        _profile('Process 12 Thread 12 "MainThread"', [[0, 1, 2], [0, 3], [0, 1, 2]]),
        frames=FRAMES,
    )
    [thread] = pyspy.parse_speedscope(document, pid=99)
    assert (thread.pid, thread.tid, thread.name) == (12, 12, "MainThread")
    assert thread.stacks == [
        (PyFrame("forward", LINEAR, 125), PyFrame("main", SCRIPT, 22), PyFrame("<module>", SCRIPT, 40)),
        (PyFrame("main", SCRIPT, 23), PyFrame("<module>", SCRIPT, 40)),
        (PyFrame("forward", LINEAR, 125), PyFrame("main", SCRIPT, 22), PyFrame("<module>", SCRIPT, 40)),
    ]


def test_a_name_without_its_process_belongs_to_the_pid_read():
    document = _document(
        _profile('Thread 12 "MainThread"', [[0, 3]]),
        _profile('Thread 31 "pin_memory"', [[0, 1]]),
        frames=FRAMES,
    )
    threads = pyspy.parse_speedscope(document, pid=12)
    assert [(t.pid, t.tid, t.name) for t in threads] == [(12, 12, "MainThread"), (12, 31, "pin_memory")]


def test_each_process_keeps_its_pid_and_its_pseudo_frame_is_dropped():
    # With --subprocesses a child's threads come under their own pid; py-spy names a thread it
    # could not read the name of with empty quotes (the main thread of a script that never
    # imported threading).
    document = _document(
        _profile('Process 12 Thread 12 ""', [[4, 0, 1, 2]]),
        _profile('Process 13 Thread 13 "MainThread"', [[4, 0, 3], [4, 0, 3]]),
        frames=FRAMES,
    )
    threads = pyspy.parse_speedscope(document, pid=12)
    assert [(t.pid, t.tid, t.name) for t in threads] == [(12, 12, ""), (13, 13, "MainThread")]
    assert threads[0].stacks == [
        (PyFrame("forward", LINEAR, 125), PyFrame("main", SCRIPT, 22), PyFrame("<module>", SCRIPT, 40))
    ]
    assert threads[1].stacks == [(PyFrame("main", SCRIPT, 23), PyFrame("<module>", SCRIPT, 40))] * 2


def test_a_child_process_is_rooted_at_its_parents_too():
    # py-spy pushes the child's process frame, then each parent's: outermost first in the file.
    parent = _frame('process 12:"torchrun train.py"', "", 0)
    child = _frame('process 13:"python train.py"', "", 0)
    document = _document(
        _profile('Process 13 Thread 13 "MainThread"', [[5, 6, 0, 3]]), frames=[*FRAMES, parent, child]
    )
    [thread] = pyspy.parse_speedscope(document, pid=12)
    assert (thread.pid, thread.stacks) == (
        13,
        [(PyFrame("main", SCRIPT, 23), PyFrame("<module>", SCRIPT, 40))],
    )


def test_a_thread_named_by_its_pthread_id_in_hex_is_read():
    # As py-spy 0.4.2 wrote it for a Python 3.10 job (no native thread id in its thread state).
    document = _document(_profile('Process 12 Thread 0x7F2C3B1DCB80 "MainThread"', [[0, 3]]), frames=FRAMES)
    threads = pyspy.parse_speedscope(document, pid=12)
    assert [(t.pid, t.tid, t.name) for t in threads] == [(12, 0x7F2C3B1DCB80, "MainThread")]


def test_a_profile_that_is_not_a_thread_is_skipped():
    document = _document(_profile("py-spy profile", [[0]]), frames=FRAMES)
    assert pyspy.parse_speedscope(document, pid=12) == []


# What py-spy 0.4.2 prints (its first line; a Rust backtrace follows some of them).
_BACKTRACE = "\n\nStack backtrace:\n   0: anyhow::error::<impl anyhow::Error>::msg\n   1: py_spy::main\n"


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        pytest.param(
            "Error: Failed to find python version from target process" + _BACKTRACE,
            ["PID 12 ", "not a Python process", "pgrep -af python"],
            id="not-python",
        ),
        pytest.param(
            "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'",
            ["no permission to read PID 12", "sudo trainmedic attach 12", "--cap-add SYS_PTRACE"],
            id="permission",
        ),
        pytest.param(
            "Error: Failed to get process executable name. Check that the process is running." + _BACKTRACE,
            ["PID 12 ", "ended", "pgrep -af python"],
            id="ended",
        ),
        pytest.param(
            # What `py-spy record --subprocesses` says of a process with no Python in its tree.
            "Error: No python processes found in process 12 or any of its subprocesses" + _BACKTRACE,
            ["PID 12 ", "not a Python process", "pgrep -af python"],
            id="no-python-in-tree",
        ),
    ],
)
def test_pyspys_error_names_the_pid_and_what_to_do(monkeypatch, said, expected):
    monkeypatch.setattr(pyspy, "_ptrace_scope", lambda: "0")
    message = pyspy._failure(12, said)
    assert "\n" not in message and "Stack backtrace" not in message
    for fragment in expected:
        assert fragment in message, message


def test_no_permission_under_yama_says_how_to_lift_it(monkeypatch):
    monkeypatch.setattr(pyspy, "_ptrace_scope", lambda: "1")
    message = pyspy._no_permission(12, "the system refused to let py-spy read it")
    assert "kernel.yama.ptrace_scope=1" in message
    assert "sudo trainmedic attach 12" in message and "sudo sysctl kernel.yama.ptrace_scope=0" in message


@pytest.mark.parametrize(("pid", "expected"), [(0, "not a process id"), (-4, "not a process id")])
def test_a_pid_that_cannot_be_a_process_is_refused(pid, expected):
    with pytest.raises(AttachError, match=expected):
        pyspy.check_process(pid)


def test_trainmedic_will_not_read_itself():
    with pytest.raises(AttachError, match="trainmedic itself"):
        pyspy.check_process(os.getpid())


@pytest.fixture(scope="module")
def waiting_child():
    """A Python child blocked in ``wait_here``, started once for the live tests."""
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"  # its stack is now in wait_here
        yield child.pid
    finally:
        child.kill()
        child.wait()


def _main_stacks(threads: list[pyspy.ThreadTrace], pid: int) -> list[tuple[PyFrame, ...]]:
    [main] = [t for t in threads if t.pid == pid and t.tid == pid]  # Linux: the main thread's tid is the pid
    return main.stacks


@pytest.mark.slow
def test_record_reads_the_function_and_line_the_child_is_at(waiting_child):
    recording = pyspy.record(waiting_child, 1, rate_hz=50)
    stacks = _main_stacks(recording.threads, waiting_child)
    assert len(stacks) >= 10, f"{len(stacks)} samples in 1 s at 50 Hz"  # a loaded VM lags it
    expected = (PyFrame("wait_here", "<string>", SLEEP_LINE), PyFrame("<module>", "<string>", CALL_LINE))
    # --nonblocking may read a stack mid-change now and then: nearly every sample, not all.
    common, count = Counter(stacks).most_common(1)[0]
    assert common == expected
    assert count >= 0.9 * len(stacks)
    assert recording.threads[0].interval_s == pytest.approx(1 / 50)


def test_dump_reads_one_stack_per_thread_now(waiting_child):
    threads = pyspy.dump(waiting_child)
    assert _main_stacks(threads, waiting_child) == [
        (PyFrame("wait_here", "<string>", SLEEP_LINE), PyFrame("<module>", "<string>", CALL_LINE))
    ]
