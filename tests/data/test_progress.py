"""Materialising a source reports progress; a terminal gets a bar, a pipe gets nothing."""

import io

import numpy as np

from trainmedic import data
from trainmedic.progress import ProgressBar


class Recorder:
    def __init__(self):
        self.events = []

    def start(self, description, total_rows):
        self.events.append(("start", description, total_rows))

    def advance(self, rows):
        self.events.append(("advance", rows))

    def stop(self):
        self.events.append(("stop",))


def test_progress_sees_every_row_of_a_materialisation(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1000, 4), dtype=np.float32))
    recorder = Recorder()
    data.load(tmp_path / "x.npy", progress=recorder)
    assert recorder.events[0][0] == "start" and recorder.events[0][2] == 1000
    assert recorder.events[0][1].endswith("x.npy")
    assert sum(e[1] for e in recorder.events if e[0] == "advance") == 1000
    assert recorder.events[-1] == ("stop",)


def test_bar_draws_rows_done(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1000, 4), dtype=np.float32))
    out = io.StringIO()
    data.load(tmp_path / "x.npy", progress=ProgressBar(stream=out))
    assert "1000/1000" in out.getvalue() and "loading" in out.getvalue()


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path, capfd):
    np.save(tmp_path / "x.npy", np.zeros((10, 4), dtype=np.float32))
    data.load(tmp_path / "x.npy")
    assert capfd.readouterr().err == ""
