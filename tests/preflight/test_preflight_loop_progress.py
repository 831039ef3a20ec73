"""loop_progress: which loops surround a line, what each counts, and reading how far it got from a
live frame without running any of the program's code; the command-line fallback for the total."""

from __future__ import annotations

import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainmedic.preflight import loop_progress
from trainmedic.preflight.frames import command_line_option
from trainmedic.preflight.loop_progress import loops_around, read_loops


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def probe_in(tmp_path: Path, text: str, watch: list | None = None, **names) -> list[dict]:
    """Run ``text`` as a script of the project; each ``probe()`` records the loops around it
    (and marks in ``watch`` when the reading starts and ends)."""
    path = write(tmp_path, text)
    records = []

    def probe():
        frame = sys._getframe(1)
        if watch is not None:
            watch.append("read")
        records.append(read_loops(frame, str(tmp_path)))
        if watch is not None:
            watch.append("done")

    runpy.run_path(str(path), init_globals={"probe": probe, **names})
    return [
        [
            (loop["line"], loop["counter"], loop["iteration"], loop["total"])
            for f in r["frames"]
            for loop in f["loops"]
        ]
        for r in records
    ]


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_loops_around_a_line_in_its_own_function_outermost_first(tmp_path):
    path = write(
        tmp_path,
        """
        for epoch in range(3):
            def step():
                return 1
            while True:
                step()
        else:
            done = True
        """,
    )
    assert [s.line for s in loops_around(str(path), 5)] == [1, 4]
    assert loops_around(str(path), 3) == []  # a def inside a loop is not run by it
    assert loops_around(str(path), 7) == []  # the else: runs after the last iteration
    assert loops_around(str(tmp_path / "gone.py"), 1) == []


def test_what_each_kind_of_loop_counts(tmp_path):
    counts = probe_in(
        tmp_path,
        """
        import itertools

        for a in range(10, 50, 4):
            if a == 22:
                probe()
        xs = [5, 6, 7, 8]
        for i, x in enumerate(xs, 1):
            if i == 3:
                probe()
        it = 0
        while it < 20:
            it += 1
            if it == 7:
                probe()
        iter_num, max_iters = 0, 5000
        while True:
            if iter_num > max_iters:
                break
            if iter_num == 812:
                probe()
                break
            iter_num += 1
        for step in itertools.count(1):
            if step >= 30:
                break
            if step == 5:
                probe()
        """,
    )
    assert counts == [
        [(3, "a", 3, 10)],  # range(10, 50, 4): 22 is the 4th value, 3 done
        [(7, "i", 2, 4)],  # enumerate(xs, 1) at i = 3: 2 done, of len(xs)
        [(11, "it", 7, 20)],
        [(16, "iter_num", 812, 5000)],  # nanoGPT: the counter tested in the break, its limit
        [(23, "step", 4, 30)],
    ]


def test_values_are_read_without_running_the_programs_code(tmp_path):
    calls = []

    class Settings:
        epochs = 7  # a class attribute read through the instance

        def __init__(self):
            self.steps = 300

        @property
        def total(self):
            calls.append("property")
            return 40

    class Tracked(dict):
        def __getitem__(self, key):
            calls.append("getitem")
            return dict.__getitem__(self, key)

    from collections import defaultdict

    fresh = defaultdict(int)
    counts = probe_in(
        tmp_path,
        """
        for a in range(settings.steps):
            if a == 1:
                probe()
                break
        for b in range(settings.epochs):
            probe()
            break
        for c in range(settings.total):
            probe()
            break
        for d in range(cfg["train"]["iters"] * 2):
            probe()
            break
        for f in range(len(cfg)):
            probe()
            break
        e = 0
        while True:
            probe()  # before the script's own fresh["cap"]: reading it must not add the key
            if e >= fresh["cap"]:
                break
            e += 1
        """,
        calls,
        settings=Settings(),
        cfg=Tracked(train=Tracked(iters=50)),
        fresh=fresh,
    )
    assert counts == [
        [(1, "a", 1, 300)],
        [(5, "b", 0, 7)],
        [(8, "c", 0, None)],  # a property is code: not called, the total is not known
        [(11, "d", 0, 100)],
        [(14, "f", 0, 1)],
        [(18, "e", 0, None)],  # a defaultdict's missing key: not there, not added
    ]
    # Nothing of the program ran while we read (between "read" and "done"); the script's own
    # range(settings.total) and cfg["train"]["iters"] did, once each.
    readings = " ".join(calls).split("read")[1:]
    assert [reading.split("done")[0].strip() for reading in readings] == [""] * 6
    assert (calls.count("property"), calls.count("getitem")) == (1, 2)
    assert dict(fresh) == {"cap": 0}  # added by the script's own read, after ours


def test_unknowns_say_why(tmp_path):
    path = write(
        tmp_path,
        """
        for batch in loader:
            pass
        while not done:
            pass
        for i, batch in enumerate(loader):
            pass
        """,
    )
    (no_count,) = loops_around(str(path), 2)
    assert no_count.counter is None
    assert no_count.why == "`loader` gives no count and the body adds to no counter"
    (flag,) = loops_around(str(path), 4)
    assert flag.why == "`not done` gives no count and the body adds to no counter"

    class Loader:
        def __len__(self):
            raise AssertionError("len() of the program's object must not be called")

    (sized,) = loops_around(str(path), 6)
    frame = type("Frame", (), {"f_locals": {"i": 12, "loader": Loader()}, "f_globals": {}})()
    record = loop_progress.progress(sized, frame)
    assert (record["iteration"], record["total"], record["total_key"]) == (12, None, "loader")
    assert record["unknown"] == "len(loader) cannot be read without running the program's code"


def test_only_the_projects_frames_are_read(tmp_path):
    records = []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def probe():
        records.append(read_loops(sys._getframe(1), str(elsewhere)))

    path = write(tmp_path, "for i in range(3):\n    probe()\n")
    runpy.run_path(str(path), init_globals={"probe": probe})
    assert records[0] == {"format": loop_progress.FORMAT, "frames": []}


@pytest.mark.parametrize(
    "argv, key, found",
    [
        (["--max_iters=5000"], "max_iters", ("--max_iters=5000", 5000)),
        (["--lr", "0.1", "--max-iters", "5000"], "max_iters", ("--max-iters 5000", 5000)),
        (["train.max_iters=5e3"], "max_iters", ("train.max_iters=5e3", 5000)),
        (["--max_iters"], "max_iters", None),
        (["--max_iters=lots"], "max_iters", None),
        (["max_iters"], "max_iters", None),
        (["--steps=5"], "max_iters", None),
    ],
)
def test_the_option_that_says_a_total(argv, key, found):
    assert command_line_option(argv, key) == found


def test_loop_progress_imports_only_the_standard_library():
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        before = set(sys.modules)
        spec = importlib.util.spec_from_file_location("_tm_loops", {loop_progress.__file__!r})
        module = importlib.util.module_from_spec(spec)
        sys.modules["_tm_loops"] = module
        spec.loader.exec_module(module)
        new = {{name.split(".")[0] for name in set(sys.modules) - before}} - {{"_tm_loops"}}
        print(sorted(n for n in new if n not in sys.stdlib_module_names))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
