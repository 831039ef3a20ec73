"""A stuck run names the user's loop still iterating and how far it got, not where the last stack
sample fell: real experiments in real child processes.

Each script counts to a fixed iteration and then blocks inside it for good (a step that never
returns), so the count at the dump is the same on any machine: the budget only has to outlast
the interpreter's start, and nothing waits on time to synchronise.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from trainmedic.preflight.console import render_preflight

#: nanoGPT's shape: module-level config overridden by --key=value, a `while True` loop counted by
#: `iter_num += 1` and left by `if iter_num > max_iters: break`, the model in another file.
NANO_TRAIN = """
import sys

from model import Model

max_iters = 600000
gradient_accumulation_steps = 4
for arg in sys.argv[1:]:
    key, value = arg[2:].split("=")
    globals()[key] = int(value)

model = Model()
iter_num = 0
while True:
    if iter_num > max_iters:
        break
    for micro_step in range(gradient_accumulation_steps):
        model.forward(iter_num)
    iter_num += 1
"""

NANO_MODEL = """
import time


class Model:
    def forward(self, iteration):
        for layer in range(3):
            if iteration >= 812:
                time.sleep(3600)  # a step that never returns
        return iteration
"""

#: The config file asks for 5000 iterations; the loop is in a function, the config a tracked dict.
CONFIG_TRAIN = """
import json
import threading


def train(cfg):
    never = threading.Event()
    for step in range(cfg["train"]["max_iters"]):
        if step == 812:
            never.wait()


with open("config.json") as handle:
    train(json.load(handle))
"""


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def render(report, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    render_preflight(report, console)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


@pytest.mark.slow
def test_a_nanogpt_loop_stuck_in_the_model_names_the_training_loop_and_iteration_812_of_5000(project):
    train = project.write("train.py", NANO_TRAIN)
    model = project.write("model.py", NANO_MODEL)
    report = project.run(commands=("python train.py --max_iters=5000",), budget="2s")
    (result,) = report.experiments
    assert result.verdict == "stuck"
    where = result.where
    # The innermost user line is still told (secondary detail) ...
    assert (where.frame.path, where.frame.line) == (str(model.resolve()), line_of(model, "time.sleep"))
    # ... but the loop is the training loop of train.py, not the model's layer loop.
    assert (where.loop_path, where.loop_line, where.loop_source) == (
        str(train.resolve()),
        line_of(train, "while True"),
        "while True:",
    )
    progress = where.progress
    assert (progress.iteration, progress.total, progress.counter) == (812, 5000, "iter_num")
    assert (progress.total_text, progress.total_from) == ("max_iters", "--max_iters=5000")
    others = [(loop.line, loop.progress.iteration, loop.progress.total) for loop in where.other_loops]
    assert others == [(line_of(train, "for micro_step"), 0, 4), (line_of(model, "for layer"), 0, 3)]

    text = render(report)
    loop = line_of(train, "while True")
    assert f"in the loop at train.py:{loop} (iteration 812 of 5000), at model.py:" in render(report, 200)
    assert (
        f"  in the loop at train.py:{loop} in <module>, at iteration 812 of 5000\n"
        f"    {loop} | while True:\n"
        "  counted by iter_num; total from max_iters (--max_iters=5000 on the command line)\n"
        f"  at model.py:{line_of(model, 'time.sleep')} in forward, called from that loop\n"
    ) in text
    json_where = report.to_dict()["experiments"][0]["where"]
    assert (json_where["loop_path"], json_where["loop_line"], json_where["progress"]["iteration"]) == (
        "train.py",
        loop,
        812,
    )


@pytest.mark.slow
def test_a_loop_over_a_config_files_count_reads_it_without_the_tracker_seeing_a_read(project):
    script = project.write("train.py", CONFIG_TRAIN)
    project.write("config.json", '{"train": {"max_iters": 5000, "lr": 0.1}}\n')
    (result,) = project.run(commands=("python train.py",), budget="2s").experiments
    where = result.where
    assert (where.loop_line, where.loop_path, where.loop_function) == (line_of(script, "for step in"), "", "")
    assert (where.frame.function, where.frame.line) == ("train", line_of(script, "never.wait()"))
    progress = where.progress
    assert (progress.iteration, progress.total, progress.counter) == (812, 5000, "step")
    assert progress.total_text == 'range(cfg["train"]["max_iters"])'


@pytest.mark.slow
def test_a_total_the_frame_cannot_read_is_taken_from_the_command_line(project):
    # A config object answering through __getattr__ is not read (it is the program's code): the
    # option of the same name on the command line says the total.
    script = project.write(
        "train.py",
        """
        import argparse
        import threading


        class Config:
            def __init__(self, values):
                self._values = values

            def __getattr__(self, name):
                return self._values[name]


        parser = argparse.ArgumentParser()
        parser.add_argument("--max-iters", type=int)
        cfg = Config(vars(parser.parse_args()))
        for it in range(cfg.max_iters):
            if it == 812:
                threading.Event().wait()
        """,
    )
    (result,) = project.run(commands=("python train.py --max-iters 5000",), budget="2s").experiments
    progress = result.where.progress
    assert result.where.loop_line == line_of(script, "for it in")
    assert (progress.iteration, progress.total, progress.total_from) == (812, 5000, "--max-iters 5000")


@pytest.mark.slow
def test_the_loop_with_the_most_iterations_is_the_stuck_one_not_the_phases_around_it(project):
    script = project.write(
        "train.py",
        """
        import time

        ITERATIONS = {"warmup": 5, "main": 40000, "cooldown": 5}


        def train_phase(name):
            for it in range(ITERATIONS[name]):
                if it == 812:
                    time.sleep(3600)


        for index, phase in enumerate(ITERATIONS):
            train_phase(phase)
        """,
    )
    (result,) = project.run(commands=("python train.py",), budget="2s").experiments
    where = result.where
    assert (where.loop_line, where.progress.iteration, where.progress.total) == (
        line_of(script, "for it in"),
        812,
        40000,
    )
    (outer,) = where.other_loops
    assert (outer.line, outer.function, outer.progress.iteration, outer.progress.total) == (
        line_of(script, "for index, phase"),
        "<module>",
        1,
        3,
    )


@pytest.mark.slow
def test_a_loop_without_a_counter_says_how_far_is_not_known(project):
    script = project.write(
        "train.py",
        """
        import threading


        def batches():
            while True:
                yield [1, 2, 3]


        for batch in batches():
            threading.Event().wait()
        """,
    )
    report = project.run(commands=("python train.py",), budget="2s")
    (result,) = report.experiments
    where = result.where
    assert where.loop_line == line_of(script, "for batch in")
    assert (where.progress.iteration, where.progress.total) == (None, None)
    assert where.progress.unknown == "`batches()` gives no count and the body adds to no counter"
    text = render(report)
    assert f"in the loop at train.py:{where.loop_line} (how far: not known), at train.py:" in render(
        report, 200
    )
    assert (
        "  how far it got is not known: `batches()` gives no count and the body adds to no counter\n" in text
    )


@pytest.mark.slow
def test_a_loop_stuck_in_native_code_is_found_and_its_progress_said_unknown(project):
    # sum() over a huge range never returns to the interpreter: the Python-level handler (and the
    # loop record) never comes, the faulthandler dump still gives the frames and so the loop.
    script = project.write(
        "crunch.py",
        """
        def total():
            return sum(range(10**13))


        for i in range(10):
            total()
        """,
    )
    (result,) = project.run(commands=("python crunch.py",), budget="1.5s").experiments
    where = result.where
    assert (where.frame.function, where.loop_line, where.loop_function) == (
        "total",
        line_of(script, "for i in"),
        "<module>",
    )
    assert where.progress.iteration is None
    assert "did not answer in Python code" in where.progress.unknown
