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
from trainmedic.tune.model import Config
from trainmedic.tune.script import batch_option, measure_script, script_grid
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
    assert sets == [("batch_size", ["2", "4", "8"]), ("--lr", ["1e-3", "1e-4"]), ("model.layers", ["[1,2]", "[3]"])]
    grid = script_grid(sets)
    assert len(grid) == 3 * 2 * 2
    assert grid[0] == Config(2, overrides=(("batch_size", "2"), ("--lr", "1e-3"), ("model.layers", "[1,2]")))
    assert [c.batch_size for c in grid] == [2] * 4 + [4] * 4 + [8] * 4  # first option varies slowest
    assert grid[-1].label == "batch_size=8 --lr=1e-4 model.layers=[3]"
    assert all(c.batch_size is None for c in script_grid(parse_sets(["lr=1,2"])))


@pytest.mark.parametrize(("names", "expected"), [
    (["lr", "batch_size"], "batch_size"),
    (["--batch-size", "lr"], "--batch-size"),
    (["training.batch_size"], "training.batch_size"),
    (["per_device_eval_batch_size", "per_device_train_batch_size"], "per_device_train_batch_size"),
    (["--bs"], "--bs"),
    (["eval_batch_size", "lr"], None),
    (["lr", "width"], None),
])
def test_batch_option_finds_the_training_batch(names, expected):
    assert batch_option(names) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("batch_size", "not NAME=V1,V2"),
    ("=2,4", "not NAME=V1,V2"),
    ("batch size=2", "not NAME=V1,V2"),
    ("bs=2,,4", "empty value"),
    ("bs=", "empty value"),
])
def test_bad_set_syntax_names_the_text_and_the_form(text, says):
    with pytest.raises(TuneError) as info:
        parse_sets([text])
    message = str(info.value)
    assert says in message and repr(text) in message and "e.g. --set " in message


def test_the_same_option_twice_and_mixed_batch_units_are_refused():
    with pytest.raises(TuneError, match="twice"):
        parse_sets(["batch_size=2", "--batch-size=4"])
    with pytest.raises(TuneError, match="'auto' is not a positive whole number"):
        script_grid(parse_sets(["batch_size=2,auto"]))


# --- command lines -------------------------------------------------------------------------------

def test_command_replaces_every_spelling_of_an_existing_value():
    style = argparse_style(batch_size="--batch-size", lr="--lr")
    args = ["--batch_size", "4", "--epochs", "3", "--lr=0.1", "--seed", "-1", "--", "--lr", "data"]
    assert command_for("train.py", args, style, [("batch_size", "16"), ("lr", "1e-4")]) == [
        "train.py", "--batch-size=16", "--epochs", "3", "--lr=1e-4", "--seed", "-1", "--", "--lr", "data"]
    # Absent: appended, before a bare -- (after it, tokens are the script's positionals).
    assert command_for("train.py", ["--epochs", "3"], style, [("lr", "1e-4")]) == ["train.py", "--epochs", "3", "--lr=1e-4"]
    assert command_for("t.py", ["--", "x"], style, [("lr", "2")]) == ["t.py", "--lr=2", "--", "x"]


def test_hydra_command_replaces_key_value_tokens():
    style = OptionStyle(HYDRA)
    args = ["model=resnet", "training.batch_size=8", "+training.batch_size=9", "seed=1"]
    assert command_for("app.py", args, style, [("training.batch_size", "32"), ("lr", "0.1")]) == [
        "app.py", "model=resnet", "training.batch_size=32", "seed=1", "lr=0.1"]


# --- validating the options ----------------------------------------------------------------------

def test_argparse_options_are_read_from_help_in_either_spelling(tmp_path):
    script = write(tmp_path, "train.py", MLP)
    style = check_options(script, ["--steps", "5"], ["batch_size", "--lr"])
    assert style.kind == ARGPARSE
    assert style.spellings == {"batch_size": "--batch-size", "--lr": "--lr"}
    assert command_for(script, ["--steps", "5"], style, [("batch_size", "4")])[1:] == ["--steps", "5", "--batch-size=4"]


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
    script = write(tmp_path, "loop.py", 'import sys\nn = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 1\n')
    assert check_options(script, [], ["iters"]).spellings == {"iters": "--iters"}
    with pytest.raises(TuneError, match="its options per the source of loop.py"):
        check_options(script, [], ["epochs"])
    # key=value overrides of globals, nanoGPT-style, without Hydra: `--cfg all` fails, the source tells.
    script = write(tmp_path, "kv.py", "import sys\nbatch_size = 8\nfor arg in sys.argv[1:]:\n    key, value = arg.split('=')\n")
    assert check_options(script, ["seed=1"], ["batch_size"]).kind == HYDRA
    with pytest.raises(TuneError, match="did you mean batch_size"):
        check_options(script, ["seed=1"], ["batchsize"])


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

def test_measure_script_gives_per_trial_speeds_and_more_samples_at_a_larger_batch(tmp_path):
    script = write(tmp_path, "train.py", MLP)
    style = argparse_style(batch_size="--batch-size")  # what check_options finds (tested above)
    rows = [measure_script(script, ["--steps", "1000", "--batch-size", "64"], config, steps=12, trials=3,
                           timeout_s=120, warmup=2, style=style)
            for config in script_grid(parse_sets(["batch_size=2,512"]))]
    for row in rows:
        assert row.status == "measured", row.reason
        assert len(row.measurement.trials) == 3 and row.measurement.steps_per_trial == 4
        assert all(speed > 0 for speed in row.measurement.trials)
        assert row.measurement.first_step_s > 0 and row.measurement.warmup_steps == 2
    assert (tmp_path / "seen.txt").read_text().split() == ["2", "0.01", "512", "0.01"]  # the override won
    small, large = rows
    # Per-step overhead dominates a tiny MLP: 256x the samples cost far less than 256x the time.
    assert large.samples_per_s > 4 * small.samples_per_s


def test_a_crashing_script_is_a_failed_row_with_its_error_line(tmp_path):
    script = write(tmp_path, "crash.py", "import sys\nraise RuntimeError('shape mismatch: 3 vs 4')\n")
    row = measure_script(script, [], Config(None, overrides=(("lr", "1"),)), steps=4, trials=2, timeout_s=120)
    assert row.status == "failed" and row.measurement is None
    assert row.reason.startswith("RuntimeError: shape mismatch: 3 vs 4 (at ")

    mlp = write(tmp_path, "train.py", MLP)
    row = measure_script(mlp, [], Config(None, overrides=(("--epochs", "1"),)), steps=4, trials=2, timeout_s=120)
    assert row.status == "failed" and row.reason == "train.py: error: unrecognized arguments: --epochs=1"


def test_a_script_without_training_steps_or_in_time_fails(tmp_path):
    idle = write(tmp_path, "idle.py", "print('nothing to train')\n")
    row = measure_script(idle, [], Config(None), steps=4, trials=2, timeout_s=120)
    assert row.status == "failed" and "before trainmedic saw a steady-state training step" in row.reason
    slow = write(tmp_path, "slow.py", "import time\ntime.sleep(120)\n")
    started = time.monotonic()
    row = measure_script(slow, [], Config(None), steps=4, trials=2, timeout_s=4)
    assert row.status == "failed" and row.reason.startswith("no result within 4 s")
    assert time.monotonic() - started < 30


def test_ctrl_c_kills_the_child_process_group_and_reraises(tmp_path):
    script = write(tmp_path, "hang.py", """
        import os, subprocess, sys, time
        from pathlib import Path
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        here = Path(__file__).parent
        (here / "pids.tmp").write_text(f"{os.getpid()} {helper.pid}")
        os.replace(here / "pids.tmp", here / "pids.txt")
        time.sleep(300)
    """)
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from trainmedic.tune.model import Config
        from trainmedic.tune.script import measure_script
        try:
            measure_script({str(script)!r}, [], Config(None), steps=4, trials=2, timeout_s=300)
        except KeyboardInterrupt:
            sys.exit(42)
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
