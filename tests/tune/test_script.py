"""Script mode of tune: real scripts in tmp_path, their real --help, real `trainmedic run` children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proc_kit import alive, wait_for

from trainmedic.errors import TuneError
from trainmedic.run.diagnose.rules.compute import batch_option
from trainmedic.tune.model import Config
from trainmedic.tune.script import measure_script, script_grid
from trainmedic.tune.script_options import (
    ARGPARSE,
    HYDRA,
    OptionStyle,
    check_options,
    command_for,
    parse_sets,
)

#: A small argparse training script: an MLP for --steps steps of --batch-size samples. It records
#: the options it was given, so a test can see the overrides arrive.
MLP = """
import argparse
from pathlib import Path

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=1e-2)
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()
with open(Path(__file__).with_name("seen.txt"), "a") as seen:
    seen.write(f"{args.batch_size} {args.lr}\\n")
torch.set_num_threads(1)  # a 2-core CI box: no intra-op threads fighting the watcher
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
x, y = torch.randn(args.batch_size, 32), torch.randn(args.batch_size, 1)
for _ in range(args.steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

#: Hydra is not installed here: a look-alike that takes key=value overrides and answers
#: `--cfg all` with the composed config as Hydra prints it (a list of mappings included).
HYDRA_LIKE = """
import sys

CONFIG = '''\\
training:
  batch_size: 8
  lr: 0.1
model:
  width: 16
  layers:
  - size: 4
    act: relu
hydra:
  run:
    dir: outputs
'''
if "--cfg" in sys.argv:
    print(CONFIG)
    sys.exit(0)
"""


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path


def argparse_style(**spellings: str) -> OptionStyle:
    return OptionStyle(ARGPARSE, spellings)


# --- the grid ------------------------------------------------------------------------------------


def test_grid_is_the_product_with_the_batch_size_filled_in():
    sets = parse_sets(["batch_size=2,4,8", "--lr=1e-3, 1e-4", "model.layers=[1,2],[3]"])
    assert sets == [
        ("batch_size", ["2", "4", "8"]),
        ("--lr", ["1e-3", "1e-4"]),
        ("model.layers", ["[1,2]", "[3]"]),
    ]
    grid = script_grid(sets)
    assert len(grid) == 3 * 2 * 2
    # The batch is what a run shows, never the value set: it stays unknown until then.
    assert grid[0] == Config(
        None, overrides=(("batch_size", "2"), ("--lr", "1e-3"), ("model.layers", "[1,2]"))
    )
    assert [dict(c.overrides)["batch_size"] for c in grid] == ["2"] * 4 + ["4"] * 4 + [
        "8"
    ] * 4  # first varies slowest
    assert grid[-1].label == "batch_size=8 --lr=1e-4 model.layers=[3]"
    assert len(script_grid(parse_sets(["batch_size=2,auto"]))) == 2  # "auto": the run shows the batch


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["lr", "batch_size"], "batch_size"),
        (["--batch-size", "lr"], "--batch-size"),
        (["training.batch_size"], "training.batch_size"),
        (["per_device_eval_batch_size", "per_device_train_batch_size"], "per_device_train_batch_size"),
        (["--bs"], "--bs"),
        (["eval_batch_size", "lr"], None),
        (["lr", "width"], None),
    ],
)
def test_batch_option_finds_the_training_batch(names, expected):
    assert batch_option(names) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("batch_size", "not NAME=V1,V2"),
        ("=2,4", "not NAME=V1,V2"),
        ("batch size=2", "not NAME=V1,V2"),
        ("bs=2,,4", "empty value"),
        ("bs=", "empty value"),
    ],
)
def test_bad_set_syntax_names_the_text_and_the_form(text, says):
    with pytest.raises(TuneError) as info:
        parse_sets([text])
    message = str(info.value)
    assert says in message and repr(text) in message and "e.g. --set " in message


def test_the_same_option_twice_is_refused():
    with pytest.raises(TuneError, match="twice"):
        parse_sets(["batch_size=2", "--batch-size=4"])


# --- command lines -------------------------------------------------------------------------------


def test_command_replaces_every_spelling_of_an_existing_value():
    style = argparse_style(batch_size="--batch-size", lr="--lr")
    args = ["--batch_size", "4", "--epochs", "3", "--lr=0.1", "--seed", "-1", "--", "--lr", "data"]
    assert command_for("train.py", args, style, [("batch_size", "16"), ("lr", "1e-4")]) == [
        "train.py",
        "--batch-size=16",
        "--epochs",
        "3",
        "--lr=1e-4",
        "--seed",
        "-1",
        "--",
        "--lr",
        "data",
    ]
    # Absent: appended, before a bare -- (after it, tokens are the script's positionals).
    assert command_for("train.py", ["--epochs", "3"], style, [("lr", "1e-4")]) == [
        "train.py",
        "--epochs",
        "3",
        "--lr=1e-4",
    ]
    assert command_for("t.py", ["--", "x"], style, [("lr", "2")]) == ["t.py", "--lr=2", "--", "x"]


def test_hydra_command_replaces_key_value_tokens():
    style = OptionStyle(HYDRA)
    args = ["model=resnet", "training.batch_size=8", "+training.batch_size=9", "seed=1"]
    assert command_for("app.py", args, style, [("training.batch_size", "32"), ("lr", "0.1")]) == [
        "app.py",
        "model=resnet",
        "training.batch_size=32",
        "seed=1",
        "lr=0.1",
    ]


# --- validating the options ----------------------------------------------------------------------


@pytest.mark.slow
def test_argparse_options_are_read_from_help_in_either_spelling(tmp_path):
    script = write(tmp_path, "train.py", MLP)
    style = check_options(script, ["--steps", "5"], ["batch_size", "--lr"])
    assert style.kind == ARGPARSE
    assert style.spellings == {"batch_size": "--batch-size", "--lr": "--lr"}
    assert command_for(script, ["--steps", "5"], style, [("batch_size", "4")])[1:] == [
        "--steps",
        "5",
        "--batch-size=4",
    ]


@pytest.mark.slow
def test_a_misspelt_option_is_one_line_naming_it_and_the_close_one(tmp_path):
    script = write(tmp_path, "train.py", MLP)
    with pytest.raises(TuneError) as info:
        check_options(script, [], ["bach_size"])
    message = str(info.value)
    assert "\n" not in message
    assert "no option --bach_size" in message and "did you mean --batch-size?" in message
    assert "--lr" in message and "fix: --set batch-size=..." in message


def test_a_script_without_a_parser_is_checked_against_its_source(tmp_path):
    # It ignores --help and just runs (here: prints); its options are the literals it looks for.
    script = write(
        tmp_path,
        "loop.py",
        'import sys\nn = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 1\n',
    )
    assert check_options(script, [], ["iters"]).spellings == {"iters": "--iters"}
    with pytest.raises(TuneError, match="its options per the source of loop.py"):
        check_options(script, [], ["epochs"])
    # key=value overrides of globals, nanoGPT-style, without Hydra: `--cfg all` fails, the source tells.
    script = write(
        tmp_path,
        "kv.py",
        "import sys\nbatch_size = 8\nfor arg in sys.argv[1:]:\n    key, value = arg.split('=')\n",
    )
    assert check_options(script, ["seed=1"], ["batch_size"]).kind == HYDRA
    with pytest.raises(TuneError, match="did you mean batch_size"):
        check_options(script, ["seed=1"], ["batchsize"])


@pytest.mark.slow
def test_a_global_of_a_script_that_reads_no_arguments_is_no_option(tmp_path):
    # `batch_size = 32` in a script without a parser: --help trains and lists nothing, and the
    # global looked like a nanoGPT-style option, so `--set batch_size=64,128` was "tuned".
    script = write(
        tmp_path,
        "train.py",
        """
        import torch
        batch_size = 32
        x = torch.randn(batch_size, 4)
    """,
    )
    with pytest.raises(TuneError) as info:
        check_options(script, [], ["batch_size"])
    message = str(info.value)
    assert (
        "\n" not in message and "train.py has no option --batch_size (from --set batch_size=...)" in message
    )
    assert (
        "none found" in message
        and 'fix: give the script an option for it (e.g. parser.add_argument("--batch_size"' in message
    )
    # The same global in a script whose command line reaches it (nanoGPT's configurator) is one.
    script = write(tmp_path, "nano.py", "batch_size = 32\nexec(open('configurator.py').read())\n")
    write(tmp_path, "configurator.py", "import sys\nfor arg in sys.argv[1:]:\n    pass\n")
    assert check_options(script, [], ["batch_size"]).spellings == {"batch_size": "--batch_size"}


def test_hydra_style_is_detected_and_checked_against_the_composed_config(tmp_path):
    script = write(tmp_path, "app.py", HYDRA_LIKE)
    style = check_options(script, ["model.width=8"], ["training.batch_size", "+extra.key", "hydra.run.dir"])
    assert style.kind == HYDRA
    assert {"training.batch_size", "model.layers"} <= set(style.known)
    assert not any(key.startswith("model.layers.") for key in style.known)  # list items are no keys
    with pytest.raises(TuneError) as info:
        check_options(script, ["model.width=8"], ["batch_size"])  # the key lives under training.
    assert "\n" not in str(info.value) and "did you mean training.batch_size?" in str(info.value)
    with pytest.raises(TuneError, match="did you mean training.lr"):
        check_options(script, ["seed=1"], ["training.lrr"])


# --- measuring -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_measure_script_gives_per_trial_speeds_and_more_samples_at_a_larger_batch(tmp_path):
    script = write(tmp_path, "train.py", MLP)
    style = argparse_style(batch_size="--batch-size")  # what check_options finds (tested above)
    rows = [
        measure_script(
            script,
            ["--steps", "1000", "--batch-size", "64"],
            config,
            steps=12,
            trials=3,
            timeout_s=120,
            warmup=2,
            style=style,
        )
        for config in script_grid(parse_sets(["batch_size=2,512"]))
    ]
    for row in rows:
        assert row.status == "measured", row.reason
        assert len(row.measurement.trials) == 3 and row.measurement.steps_per_trial == 4
        assert all(speed > 0 for speed in row.measurement.trials)
        assert row.measurement.first_step_s > 0 and row.measurement.warmup_steps == 2
    assert (tmp_path / "seen.txt").read_text().split() == ["2", "0.01", "512", "0.01"]  # the override won
    small, large = rows
    # Per-step overhead dominates a tiny MLP: 256x the samples cost far less than 256x the time.
    assert large.samples_per_s > 4 * small.samples_per_s


#: Takes --batch-size but trains on a fixed batch of 24 (the option is read and never used).
IGNORES_BATCH = MLP.replace(
    "x, y = torch.randn(args.batch_size, 32), torch.randn(args.batch_size, 1)",
    "x, y = torch.randn(24, 32), torch.randn(24, 1)",
)
#: Calls its model with a keyword argument only: the forward hook sees no batch.
KEYWORD_CALL = """
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(32, 1)

    def forward(self, *, features):
        return self.inner(features)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(args.batch_size, 32), torch.randn(args.batch_size, 1)
for _ in range(args.steps):
    loss = torch.nn.functional.mse_loss(model(features=x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_samples_per_s_count_the_batch_the_model_ran_not_the_value_set(tmp_path):
    script = write(tmp_path, "train.py", IGNORES_BATCH)
    style = argparse_style(batch_size="--batch-size")
    row = measure_script(
        script,
        ["--steps", "1000"],
        script_grid(parse_sets(["batch_size=512"]))[0],
        steps=12,
        trials=3,
        timeout_s=120,
        warmup=2,
        style=style,
    )
    assert row.status == "measured", row.reason
    assert (tmp_path / "seen.txt").read_text().split() == ["512", "0.01"]  # the option arrived...
    assert row.config.batch_size == 24  # ...and the speed counts the 24 samples a step really trained
    assert row.config.overrides == (("batch_size", "512"),)


@pytest.mark.slow
def test_a_batch_the_probe_cannot_see_gives_steps_per_second(tmp_path):
    script = write(tmp_path, "train.py", KEYWORD_CALL)
    style = argparse_style(batch_size="--batch-size")
    row = measure_script(
        script,
        ["--steps", "1000"],
        script_grid(parse_sets(["batch_size=64"]))[0],
        steps=12,
        trials=3,
        timeout_s=120,
        warmup=2,
        style=style,
    )
    assert row.status == "measured", row.reason
    assert row.config.batch_size is None  # not 64: a value set is no evidence of the batch run


def test_one_unit_for_the_table_and_an_option_that_changed_nothing_is_named():
    from trainmedic.tune.model import Measurement, Row, TuneResult
    from trainmedic.tune.script_search import _check_batch_option, _one_unit

    def row(value: str, seen: int | None, rates: tuple) -> Row:
        return Row(Config(seen, overrides=(("batch_size", value),)), "measured", Measurement(rates, 4, 1.0))

    result = TuneResult(
        "train.py",
        "as the script chooses",
        None,
        rows=[row("64", 32, (320.0, 330.0, 340.0)), row("128", 32, (640.0, 660.0, 680.0))],
    )
    _one_unit(result)
    _check_batch_option(result, ["batch_size"])
    assert result.unit == "samples/s" and result.rows[0].samples_per_s == 330.0
    assert any(
        "batch_size took 2 values (64, 128) but the model was called with batch 32 in every run" in w
        for w in result.warnings
    )
    # One run showed its batch, one did not: the whole table is steps/s, and the note says why.
    result = TuneResult(
        "train.py",
        "as the script chooses",
        None,
        rows=[row("64", 32, (320.0, 330.0, 340.0)), row("128", None, (9.0, 10.0, 11.0))],
    )
    _one_unit(result)
    assert result.unit == "steps/s" and result.rows[0].samples_per_s == pytest.approx(330.0 / 32)
    assert any(
        n.startswith("speeds are steps/s, not samples/s: trainmedic did not see the batch")
        for n in result.notes
    )


@pytest.mark.slow
def test_a_crashing_script_is_a_failed_row_with_its_error_line(tmp_path):
    script = write(tmp_path, "crash.py", "import sys\nraise RuntimeError('shape mismatch: 3 vs 4')\n")
    row = measure_script(script, [], Config(None, overrides=(("lr", "1"),)), steps=4, trials=2, timeout_s=120)
    assert row.status == "failed" and row.measurement is None
    assert row.reason.startswith("RuntimeError: shape mismatch: 3 vs 4 (at ")

    mlp = write(tmp_path, "train.py", MLP)
    row = measure_script(
        mlp, [], Config(None, overrides=(("--epochs", "1"),)), steps=4, trials=2, timeout_s=120
    )
    assert row.status == "failed" and row.reason == "train.py: error: unrecognized arguments: --epochs=1"


@pytest.mark.slow
def test_a_script_without_training_steps_or_in_time_fails(tmp_path):
    idle = write(tmp_path, "idle.py", "print('nothing to train')\n")
    row = measure_script(idle, [], Config(None), steps=4, trials=2, timeout_s=120)
    assert row.status == "failed" and "before trainmedic saw a steady-state training step" in row.reason
    slow = write(tmp_path, "slow.py", "import time\ntime.sleep(120)\n")
    started = time.monotonic()
    row = measure_script(slow, [], Config(None), steps=4, trials=2, timeout_s=2)
    assert row.status == "failed" and row.reason.startswith("no result within 2 s")
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_ctrl_c_kills_the_child_process_group_and_reraises(tmp_path):
    script = write(
        tmp_path,
        "hang.py",
        """
        import os, subprocess, sys, time
        from pathlib import Path
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        here = Path(__file__).parent
        (here / "pids.tmp").write_text(f"{os.getpid()} {helper.pid}")
        os.replace(here / "pids.tmp", here / "pids.txt")
        time.sleep(300)
    """,
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        from trainmedic.tune.model import Config
        from trainmedic.tune.script import measure_script
        try:
            measure_script({str(script)!r}, [], Config(None), steps=4, trials=2, timeout_s=300)
        except KeyboardInterrupt:
            sys.exit(42)
    """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids_file = tmp_path / "pids.txt"
        wait_for(pids_file.exists, timeout=60)
        pids = [int(pid) for pid in pids_file.read_text().split()]
        os.kill(parent.pid, signal.SIGINT)
        _, err = parent.communicate(timeout=30)
        assert parent.returncode == 42, err
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10)
    finally:
        parent.kill()
        parent.wait()
