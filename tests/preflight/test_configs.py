"""ConfigTracker: what it records, what it must never change, and seed 004 #7 in a real child.

Seed 004 #7: ``--train-iters 5`` overrode nsgf_training.num_iterations and
nsf_training.num_iterations but missed time_predictor.num_iterations = 40000, and the smoke test
hung for hours in phase 3.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

import pytest
import tomllib
import yaml
from config_kit import load, write
from proc_kit import wait_for

from trainmedic.preflight import configs
from trainmedic.preflight.config_analysis import analyse
from trainmedic.preflight.configs import ConfigFinding, ConfigTracker, TrackedDict, TrackedList

CONFIGS_PY = Path(configs.__file__)

SEED_CONFIG = """\
# NSGF++ (seed 004): three phases, three copies of num_iterations
nsgf_training:
  num_iterations: 40000
  lr: 0.001
nsf_training:
  num_iterations: 40000
  lr: 0.0005
time_predictor:
  num_iterations: 40000
  lr: 0.0001
"""
SEED_LINE = SEED_CONFIG.splitlines().index("  num_iterations: 40000", 7) + 1  # time_predictor's copy

SEED_SCRIPT = """\
import argparse, os, time
import yaml

parser = argparse.ArgumentParser()
parser.add_argument("--config", default="config.yaml")
parser.add_argument("--train-iters", type=int, default=None)
parser.add_argument("--slow-phase", default="")
args = parser.parse_args()
with open(args.config) as f:
    cfg = yaml.safe_load(f)
if args.train_iters is not None:  # the bug: two of the three copies
    cfg["nsgf_training"]["num_iterations"] = args.train_iters
    cfg["nsf_training"]["num_iterations"] = args.train_iters

def phase(name):
    section = cfg[name]
    total, lr = 0.0, section["lr"]
    if name == args.slow_phase:
        open("phase.started", "w").close()
    for step in range(section["num_iterations"]):
        total += lr
        if name == args.slow_phase:
            time.sleep(0.01)  # 40000 steps of this is the seed's hang
    return total

for name in ("nsgf_training", "nsf_training", "time_predictor"):
    phase(name)
"""

# The driver stands in for the preflight sitecustomize: load configs.py by path (not trainmedic),
# install, run the script as __main__, write the snapshot at the end and on SIGUSR2.
DRIVER = """\
import importlib.util, json, os, runpy, signal, sys
configs_py, root, out, script = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("_tm_configs", configs_py)
configs = importlib.util.module_from_spec(spec)
sys.modules["_tm_configs"] = configs
spec.loader.exec_module(configs)
tracker = configs.ConfigTracker(root)
tracker.install()

def dump(*_):
    with open(out + ".tmp", "w") as f:
        json.dump(tracker.snapshot(), f)
    os.replace(out + ".tmp", out)

signal.signal(signal.SIGUSR2, dump)
sys.argv = [script] + sys.argv[5:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    dump()
"""


def record(tracker: ConfigTracker, name: str = "config.yaml") -> dict:
    [entry] = [f for f in tracker.snapshot()["files"] if f["path"] == name]
    return entry


def sets(tracker: ConfigTracker, name: str = "config.yaml") -> dict:
    return {s["key"]: (s["old"], s["new"], s["op"]) for s in record(tracker, name)["set"]}


NESTED = """\
model:
  width: 64
  depth: 3
  dims: [8, 16]
optim:
  lr: 0.1
layers:
  - {width: 3, act: relu}
  - {width: 4, act: tanh}
"""


# -- reads ------------------------------------------------------------------------------------


def test_item_access_get_and_setdefault_of_a_present_key_are_reads(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    assert isinstance(cfg, TrackedDict) and isinstance(cfg["model"], TrackedDict)
    assert cfg["model"]["width"] == 64
    assert cfg["optim"].get("lr") == 0.1 and cfg["optim"].get("momentum", 0.9) == 0.9
    assert cfg["model"].setdefault("depth", 99) == 3
    assert record(tracker)["read"] == ["model", "model.depth", "model.width", "optim", "optim.lr"]
    assert record(tracker)["set"] == []


def test_membership_len_and_key_iteration_are_not_reads(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    assert "model" in cfg and "nope" not in cfg and len(cfg) == 3
    assert list(cfg) == ["model", "optim", "layers"] and list(cfg.keys()) == ["model", "optim", "layers"]
    assert sorted(cfg) == ["layers", "model", "optim"]
    assert record(tracker)["read"] == []


def test_items_values_and_unpacking_read_exactly_the_children_they_hand_out(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    assert dict(cfg["model"].items())["width"] == 64
    assert record(tracker)["read"] == ["model", "model.depth", "model.dims", "model.width"]
    list(cfg["optim"].values())
    assert "optim.lr" in record(tracker)["read"]

    fresh = ConfigTracker(str(tmp_path))
    tracker.uninstall()
    fresh.install()
    try:
        for use in (dict, lambda d: {**d}, lambda d: (lambda **kw: kw)(**d), lambda d: d | {}):
            cfg = load(tmp_path / "config.yaml")
            model = cfg["model"]
            assert use(model) == {"width": 64, "depth": 3, "dims": [8, 16]}
            assert record(fresh)["read"] == ["model", "model.depth", "model.dims", "model.width"]
    finally:
        fresh.uninstall()


def test_a_list_is_read_as_one_setting_and_its_dict_items_track_their_own_keys(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    dims = cfg["model"]["dims"]
    assert isinstance(dims, TrackedList) and sum(dims) == 24
    widths = [layer["width"] for layer in cfg["layers"]]
    assert widths == [3, 4]
    entry = record(tracker)
    assert entry["keys"]["model.dims"] == "[8, 16]" and "model.dims.0" not in entry["keys"]
    assert entry["read"] == ["layers", "layers.0.width", "layers.1.width", "model", "model.dims"]


def test_json_dumps_and_yaml_safe_dump_read_everything(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    json.dumps(cfg)
    entry = record(tracker)
    assert set(entry["keys"]) <= set(entry["read"])


# -- writes -----------------------------------------------------------------------------------


def test_item_assignment_records_old_and_new_even_when_the_value_is_the_same(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    cfg["model"]["width"] = 128
    cfg["model"]["depth"] = 3
    cfg["optim"]["momentum"] = 0.9
    cfg["model"]["width"] = 256  # one entry per key: old is the file's, new the last written
    assert sets(tracker) == {
        "model.width": ("64", "256", "set"),
        "model.depth": ("3", "3", "set"),
        "optim.momentum": (None, "0.9", "set"),
    }
    [width] = [s for s in record(tracker)["set"] if s["key"] == "model.width"]
    assert width["writes"] == 2 and width["read_before"] is False and width["read_after"] is False
    assert cfg["model"]["width"] == 256
    [width] = [s for s in record(tracker)["set"] if s["key"] == "model.width"]
    assert width["read_after"] is True


def test_update_ior_setdefault_of_a_missing_key_and_deletions(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    cfg["model"].update({"width": 1}, depth=2)
    cfg["optim"].update([("lr", 0.5)])
    cfg["optim"] |= {"wd": 0.01}
    assert cfg["optim"].setdefault("nesterov", True) is True
    del cfg["model"]["dims"]
    assert cfg["optim"].pop("wd") == 0.01 and cfg["optim"].pop("missing", "d") == "d"
    assert sets(tracker) == {
        "model.width": ("64", "1", "set"),
        "model.depth": ("3", "2", "set"),
        "optim.lr": ("0.1", "0.5", "set"),
        "optim.wd": (None, None, "del"),
        "optim.nesterov": (None, "True", "default"),
        "model.dims": ("[8, 16]", None, "del"),
    }
    assert "optim.wd" in record(tracker)["read"]  # pop hands the value out
    with pytest.raises(KeyError):
        cfg["optim"].pop("missing")
    with pytest.raises(ValueError, match="dictionary update sequence element"):
        cfg["optim"].update([("a", 1, 2)])


def test_popitem_and_clear_delete_every_key(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    assert cfg["model"].popitem() == ("dims", [8, 16])
    cfg["optim"].clear()
    assert sets(tracker) == {"model.dims": ("[8, 16]", None, "del"), "optim.lr": ("0.1", None, "del")}
    assert cfg["optim"] == {}


@pytest.mark.parametrize(
    ("change", "after"),
    [
        (lambda d: d.append(32), "[8, 16, 32]"),
        (lambda d: d.extend([1]), "[8, 16, 1]"),
        (lambda d: d.insert(0, 4), "[4, 8, 16]"),
        (lambda d: d.__setitem__(0, 9), "[9, 16]"),
        (lambda d: d.__delitem__(0), "[16]"),
        (lambda d: d.pop(), "[8]"),
        (lambda d: d.remove(16), "[8]"),
        (lambda d: d.sort(reverse=True), "[16, 8]"),
        (lambda d: d.reverse(), "[16, 8]"),
        (lambda d: d.clear(), "[]"),
    ],
)
def test_every_in_place_list_change_writes_the_whole_list(tracker, tmp_path, change, after):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    change(cfg["model"]["dims"])
    assert sets(tracker) == {"model.dims": ("[8, 16]", after, "set")}
    assert cfg["model"]["dims"] == yaml.safe_load(after)


def test_augmented_list_assignment_writes_the_list_and_keeps_it_the_same_object(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    dims = cfg["model"]["dims"]
    dims += [1]
    dims *= 2
    assert dims is cfg["model"]["dims"] and dims == [8, 16, 1, 8, 16, 1]
    assert sets(tracker) == {"model.dims": ("[8, 16]", "[8, 16, 1, 8, 16, 1]", "set")}


def test_copies_keep_recording_under_the_same_keys(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    for duplicate in (cfg.copy(), copy.copy(cfg), copy.deepcopy(cfg)):
        assert isinstance(duplicate, TrackedDict) and duplicate == cfg
    deep = copy.deepcopy(cfg)
    deep["model"]["width"] = 1
    assert cfg["model"]["width"] == 64  # a deep copy is independent
    assert sets(tracker) == {"model.width": ("64", "1", "set")}
    assert record(tracker)["copied"] is False


def test_yaml_anchors_stay_one_object_recorded_under_every_path(tracker, tmp_path):
    text = "base: &b\n  steps: 10\nphase1: *b\nphase2:\n  steps: 10\n"
    cfg = load(write(tmp_path / "config.yaml", text))
    assert cfg["phase1"] is cfg["base"]
    cfg["phase1"]["steps"] = 5
    assert cfg["base"]["steps"] == 5
    assert sets(tracker) == {"base.steps": ("10", "5", "set"), "phase1.steps": ("10", "5", "set")}
    assert set(record(tracker)["keys"]) == {"base.steps", "phase1.steps", "phase2.steps"}


# -- never changes what the program computes --------------------------------------------------


def test_tracked_results_equal_the_plain_ones_for_every_format_and_loader(tracker, tmp_path):
    data = {"a": {"b": [1, 2, {"c": "x"}], "d": None}, "e": 1.5, "f": [], "g": {}}
    write(tmp_path / "c.json", json.dumps(data))
    write(tmp_path / "c.toml", 'e = 1.5\nf = []\n[a]\nb = [1, 2, {c = "x"}]\n[g]\n')
    write(tmp_path / "c.yaml", yaml.safe_dump(data))
    assert load(tmp_path / "c.json") == data
    loaded = load(tmp_path / "c.toml")
    assert isinstance(loaded, TrackedDict)
    assert loaded == {"e": 1.5, "f": [], "a": {"b": [1, 2, {"c": "x"}]}, "g": {}}
    safe = functools.partial(yaml.load, Loader=yaml.SafeLoader)
    loaders = (yaml.safe_load, yaml.full_load, yaml.unsafe_load, safe)
    for loader in loaders:
        loaded = load(tmp_path / "c.yaml", loader)
        assert isinstance(loaded, TrackedDict) and loaded == data
        assert isinstance(loaded["a"]["b"], list) and isinstance(loaded["a"], dict)
    assert [f["path"] for f in tracker.snapshot()["files"]] == ["c.json", "c.toml", "c.yaml"]


def test_serialisers_and_copies_give_what_they_give_for_plain_containers(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    plain = yaml.safe_load(NESTED)
    assert json.dumps(cfg, indent=1, sort_keys=True) == json.dumps(plain, indent=1, sort_keys=True)
    assert yaml.safe_dump(cfg) == yaml.safe_dump(plain)
    assert yaml.dump(cfg) == yaml.dump(plain) and "python/object" not in yaml.dump(cfg)
    assert repr(cfg) == repr(plain) and str(cfg["model"]["dims"]) == "[8, 16]"
    assert copy.deepcopy(cfg) == plain and cfg == plain and not (cfg != plain)
    assert ",".join(map(str, cfg["model"]["dims"])) == "8,16"


def test_a_pickle_holds_plain_containers_and_marks_the_file_copied(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NESTED))
    blob = pickle.dumps(cfg)
    assert b"trainmedic" not in blob and b"Tracked" not in blob  # unpickles without trainmedic
    back = pickle.loads(blob)
    assert type(back) is dict and type(back["layers"]) is list and type(back["layers"][0]) is dict
    assert back == cfg and record(tracker)["copied"] is True


def test_argparse_and_dataclasses_take_tracked_values(tracker, tmp_path):
    text = "model:\n  width: 64\n  act: relu\nacts: [relu, tanh]\nlr: 0.1\n"
    cfg = load(write(tmp_path / "config.yaml", text))
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=cfg["lr"])
    parser.add_argument("--act", choices=cfg["acts"], default="relu")
    parser.set_defaults(**cfg["model"])
    args = parser.parse_args(["--act", "tanh"])
    assert (args.lr, args.act, args.width) == (0.1, "tanh", 64)

    @dataclasses.dataclass
    class Model:
        width: int
        act: str

    assert dataclasses.asdict(Model(**cfg["model"])) == {"width": 64, "act": "relu"}
    assert set(record(tracker)["read"]) >= {"lr", "acts", "model.width", "model.act"}


def test_torch_and_numpy_take_tracked_lists(tracker, tmp_path):
    import numpy as np
    import torch

    cfg = load(write(tmp_path / "config.yaml", NESTED))
    assert np.array(cfg["model"]["dims"]).tolist() == [8, 16]
    assert torch.tensor(cfg["model"]["dims"]).tolist() == [8, 16]
    assert torch.nn.Linear(cfg["model"]["width"], cfg["model"]["depth"]).out_features == 3


# -- what is not tracked ----------------------------------------------------------------------


def test_files_outside_the_root_text_and_other_suffixes_are_left_alone(tmp_path):
    root, outside = tmp_path / "project", tmp_path / "elsewhere"
    tracker = ConfigTracker(str(root))
    tracker.install()
    try:
        for path in (outside / "c.yaml", root / ".venv/lib/site-packages/pkg/c.yaml", root / "c.cfg"):
            write(path, "a: 1\n")
            assert type(load(path, code_in=root)) is dict
        write(root / "c.yaml", "a: 1\n")
        assert type(load(root / "c.yaml", lambda f: yaml.safe_load(f.read()), code_in=root)) is dict  # text
        assert type(json.loads('{"a": 1}')) is dict
        write(root / "c.json", '{"a": {"b": 1}}')
        assert type(load(root / "c.json", object_pairs_hook=OrderedDict)) is OrderedDict
        assert tracker.snapshot()["files"] == []
    finally:
        tracker.uninstall()


def test_a_library_loading_a_project_file_is_left_alone(tracker, tmp_path):
    config = write(tmp_path / "config.yaml", "a: 1\n")
    installed = tmp_path / ".venv/lib/python3/site-packages/lib"
    for library in (installed, tmp_path.parent / f"{tmp_path.name}-lib"):
        assert type(load(config, code_in=library)) is dict  # called from code outside the project
    assert tracker.snapshot()["files"] == []
    assert isinstance(load(config), TrackedDict)  # the same file, loaded by the project's code


def test_a_file_too_big_to_be_a_config_is_not_wrapped(tracker, tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "MAX_BYTES", 10)
    assert type(load(write(tmp_path / "config.yaml", NESTED))) is dict
    assert tracker.snapshot()["files"] == []


def test_uninstall_restores_the_loaders_and_install_is_exclusive(tmp_path):
    originals = (json.load, tomllib.load, yaml.safe_load, yaml.load)
    tracker = ConfigTracker(str(tmp_path))
    tracker.install()
    tracker.install()  # idempotent
    with pytest.raises(RuntimeError, match="another ConfigTracker"):
        ConfigTracker(str(tmp_path)).install()
    assert json.load is not originals[0] and json.load.__wrapped__ is originals[0]
    tracker.uninstall()
    assert (json.load, tomllib.load, yaml.safe_load, yaml.load) == originals
    with pytest.raises(yaml.representer.RepresenterError):
        yaml.safe_dump(TrackedDict(a=1))  # the representers went with it


def test_the_snapshot_is_json_with_the_documented_shape(tracker, tmp_path):
    cfg = load(write(tmp_path / "sub/config.yaml", NESTED))
    cfg["model"]["width"] = 1
    snapshot = json.loads(json.dumps(tracker.snapshot()))
    assert snapshot["format"] == "trainmedic.configs/1" and snapshot["root"] == os.path.realpath(tmp_path)
    [entry] = snapshot["files"]
    assert entry["path"] == "sub/config.yaml" and entry["copied"] is False
    assert entry["keys"]["layers.1.act"] == "'tanh'" and entry["read"] == ["model"]
    assert entry["set"][0]["key"] == "model.width" and {"old", "new", "op"} <= set(entry["set"][0])


def test_configs_py_imports_only_the_standard_library(tmp_path):
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        before = set(sys.modules)
        spec = importlib.util.spec_from_file_location("_tm_configs", {str(CONFIGS_PY)!r})
        module = importlib.util.module_from_spec(spec)
        sys.modules["_tm_configs"] = module
        spec.loader.exec_module(module)
        new = {{name.split(".")[0] for name in set(sys.modules) - before}} - {{"_tm_configs", "_trainmedic_config_tracked"}}
        print(sorted(n for n in new if n not in sys.stdlib_module_names))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- seed 004 #7 in a real child process ------------------------------------------------------


def seed_project(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "nsgf"
    write(root / "config.yaml", SEED_CONFIG)
    script = write(root / "train.py", SEED_SCRIPT)
    driver = write(tmp_path / "driver.py", DRIVER)
    return root, script, driver


def expected_seed_finding(line: int) -> ConfigFinding:
    return ConfigFinding(
        "missed_override",
        "config.yaml",
        "time_predictor.num_iterations",
        line,
        "time_predictor.num_iterations = 40000 was not changed, but nsgf_training.num_iterations and "
        "nsf_training.num_iterations were set to 5 (by an override?): a run with --train-iters 5 still "
        "does 40000 here; override it too (every `num_iterations` in config.yaml), or give it its own "
        "option if it is meant to differ",
        ("nsf_training.num_iterations", "nsgf_training.num_iterations"),
    )


def test_seed_004_a_finished_smoke_run_names_the_missed_copy_at_its_line(tmp_path):
    root, script, driver = seed_project(tmp_path)
    out = tmp_path / "configs.json"
    argv = ["train.py", "--train-iters", "5"]
    done = subprocess.run(
        [sys.executable, str(driver), str(CONFIGS_PY), str(root), str(out), str(script), *argv[1:]],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    snapshot = json.loads(out.read_text())
    assert analyse(snapshot, argv) == [expected_seed_finding(SEED_LINE)]
    assert SEED_LINE == 9


def test_seed_004_a_run_stuck_in_phase_3_names_the_missed_copy_from_its_sigusr2_snapshot(tmp_path):
    root, script, driver = seed_project(tmp_path)
    out = tmp_path / "configs.json"
    argv = ["train.py", "--train-iters", "5", "--slow-phase", "time_predictor"]
    child = subprocess.Popen(
        [sys.executable, str(driver), str(CONFIGS_PY), str(root), str(out), str(script), *argv[1:]],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (root / "phase.started").exists() or child.poll() is not None, timeout=30)
        assert child.poll() is None, child.stderr.read().decode()
        child.send_signal(signal.SIGUSR2)
        wait_for(out.exists, timeout=30)
        assert child.poll() is None  # still in phase 3: 40000 steps to go
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stderr.close()
    snapshot = json.loads(out.read_text())
    assert analyse(snapshot, argv, complete=False) == [expected_seed_finding(SEED_LINE)]


# -- forked workers ---------------------------------------------------------------------------

#: A DataLoader worker under the fork start method, without torch: a forked child reads the
#: augment section of its inherited copy; the parent itself reads only ``epochs``.
FORK_SCRIPT = """\
import multiprocessing, sys
import yaml

with open("aug.yaml") as f:
    cfg = yaml.safe_load(f)

def worker(aug):
    assert aug["flip_prob"] == 0.5 and aug["noise"] == 0.1

for _ in range(cfg["epochs"]):
    p = multiprocessing.get_context("fork").Process(target=worker, args=(cfg["augment"],))
    p.start()
    p.join()
    sys.exit(p.exitcode)
"""
AUG = "augment:\n  flip_prob: 0.5\n  noise: 0.1\nepochs: 1\n"


def test_keys_read_only_in_a_forked_worker_are_not_reported_never_read(tmp_path):
    write(tmp_path / "aug.yaml", AUG)
    script = write(tmp_path / "train.py", FORK_SCRIPT)
    driver = write(tmp_path / "driver.py", DRIVER)
    out = tmp_path / "configs.json"
    done = subprocess.run(
        [sys.executable, str(driver), str(CONFIGS_PY), str(tmp_path), str(out), str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    snapshot = json.loads(out.read_text())
    (entry,) = snapshot["files"]
    assert entry["copied"] is True and "augment.flip_prob" not in entry["read"]
    assert analyse(snapshot, ["train.py"]) == []


def test_a_fork_after_uninstall_marks_nothing(tmp_path):
    # The fork hook cannot be unregistered: once uninstalled, a tracker is left alone by it.
    code = f"""\
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("_tm_configs", {str(CONFIGS_PY)!r})
configs = importlib.util.module_from_spec(spec)
sys.modules["_tm_configs"] = configs
spec.loader.exec_module(configs)
import yaml
tracker = configs.ConfigTracker(os.getcwd())
tracker.install()
exec(compile("with open('aug.yaml') as f: cfg = yaml.safe_load(f)", os.path.abspath("user.py"), "exec"))
tracker.uninstall()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps(tracker.snapshot()["files"][0]["copied"]))
"""
    write(tmp_path / "aug.yaml", AUG)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "false"
