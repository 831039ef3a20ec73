"""trainmedic plan as a user runs it: the printed plan, the JSON contract, exit codes, errors.

The renderer itself, as exact text, is tested in tests/plan/test_plan_console.py.
"""

import os
from pathlib import Path

import pytest

from trainmedic.cli.plan import PRECISIONS
from trainmedic.devices import known_devices
from trainmedic.plan.model import CATEGORIES

pytestmark = [pytest.mark.slow]

MiB, GiB = 2**20, 2**30

MLP = """
import torch


def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    x = torch.randn(batch_size, 1024)
    return dict(model=model, inputs=x, optimizer=lambda params: torch.optim.Adam(params, lr=1e-3))
"""

RAISES = """
import torch


def build(batch_size):
    raise ValueError("no data folder configured")
"""

CONTRACT = [
    "schema",
    "device",
    "capacity_bytes",
    "batch_size",
    "precision",
    "peak_bytes",
    "breakdown",
    "fits",
    "max_batch",
    "hotspots",
]
EXTRAS = {
    "reserved_bytes",
    "needed_bytes",
    "headroom",
    "exact",
    "notes",
    "warnings",
    "confidence",
    "margin",
    "required_bytes",
}


def test_the_early_precision_check_matches_the_planner():
    from trainmedic.plan.trace import PRECISIONS as PLANNER

    assert PRECISIONS == tuple(PLANNER)


# --- the command, in a child process ---------------------------------------------------------


@pytest.fixture
def mlp(tm):
    tm.script("model.py", MLP)
    return tm


@pytest.mark.slow
def test_a_plan_that_fits_prints_and_exits_0(mlp):
    result = mlp("plan", "model.py:build", "--device", "cpu", "--batch", "8")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("Plan for the host CPU (")
    assert "batch 8, fp32\n" in out.splitlines()[0] + "\n"
    for row in (
        "parameters",
        "gradients",
        "optimizer state",
        "activations",
        "temporaries",
        "= peak allocated",
        "usable after headroom",
    ):
        assert row in out
    assert "fits with " in out and "does NOT fit" not in out
    assert result.stderr == ""


def test_json_is_the_contract(mlp):
    result = mlp("plan", "model.py", "--device", "t4", "--batch", "512", "--json", "plan.json", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "JSON plan written to plan.json" in result.stderr
    data = mlp.report("plan.json")
    assert list(data)[: len(CONTRACT)] == CONTRACT
    assert set(data) - set(CONTRACT) == EXTRAS
    assert data["schema"] == "trainmedic.plan/1"
    assert (data["device"], data["batch_size"], data["precision"]) == ("t4", 512, "fp32")
    for key in ("capacity_bytes", "batch_size", "peak_bytes"):
        assert type(data[key]) is int, key
    assert data["capacity_bytes"] == 15_843_721_216
    assert list(data["breakdown"]) == list(CATEGORIES)
    assert all(type(v) is int for v in data["breakdown"].values())
    assert data["fits"] is True and data["max_batch"] is None
    assert data["peak_bytes"] == sum(v for k, v in data["breakdown"].items() if k != "cuda_context")
    assert isinstance(data["hotspots"], list) and data["hotspots"]
    for hotspot in data["hotspots"]:
        assert list(hotspot) == ["op", "where", "bytes", "formula", "advice"]
        assert type(hotspot["bytes"]) is int
        assert all(isinstance(hotspot[k], str) for k in ("op", "where", "formula", "advice"))


def test_a_card_too_small_exits_1_and_still_writes_the_json(mlp):
    result = mlp("plan", "model.py", "--capacity", "1MiB", "--batch", "8", "--json", "plan.json")
    assert result.returncode == 1, result.stderr
    assert "does NOT fit: needs " in result.stdout
    assert result.stdout.startswith("Plan for a GPU of 1.0 MiB, batch 8, fp32")
    data = mlp.report("plan.json")
    assert data["fits"] is False and data["capacity_bytes"] == MiB


@pytest.mark.slow
def test_max_batch_finds_a_batch_that_fits(mlp):
    result = mlp("plan", "model.py", "--capacity", "2GiB", "--max-batch", "--json", "plan.json")
    assert result.returncode == 0, result.stderr
    data = mlp.report("plan.json")
    assert type(data["max_batch"]) is int and data["max_batch"] > 8
    assert data["batch_size"] == data["max_batch"] and data["fits"] is True
    assert data["needed_bytes"] <= 2 * GiB
    assert (
        f"largest batch that fits: {data['max_batch']} (with 10% headroom and a 16% margin, about "
        in result.stdout
    )
    assert "how sure: estimated" in result.stdout  # a card of its own capacity: no step recorded there


def test_batch_0_is_a_usage_error_naming_it(mlp):
    result = mlp("plan", "model.py", "--device", "t4", "--batch", "0")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("trainmedic plan: error: batch size 0 ")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_device_lists_the_known_ones(mlp):
    result = mlp("plan", "model.py", "--device", "gtx9090", "--batch", "8")
    assert result.returncode == 2
    assert result.stderr.startswith("trainmedic plan: error: unknown GPU 'gtx9090'")
    assert all(key in result.stderr for key in known_devices())
    assert "--capacity" in result.stderr


def test_no_target_names_a_few_devices(mlp):
    result = mlp("plan", "model.py", "--batch", "8")
    assert result.returncode == 2
    assert "--device NAME (e.g. t4, " in result.stderr and "--capacity SIZE" in result.stderr


def test_a_missing_file_is_a_usage_error(tm):
    result = tm("plan", "nope.py:build", "--device", "t4", "--batch", "8")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "trainmedic plan: error: nope.py does not exist; expected a Python file that defines build(batch_size)."
    )


def test_a_build_that_raises_names_the_users_line(tm):
    path = tm.script("broken.py", RAISES)
    result = tm("plan", "broken.py", "--device", "t4", "--batch", "8")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "trainmedic plan: error: build(8) raised ValueError: no data folder configured"
    )
    assert f"{os.path.realpath(path)}:5" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_precision_and_no_spec_are_usage_errors(mlp):
    bad = mlp("plan", "model.py", "--device", "t4", "--batch", "8", "--precision", "fp8")
    assert (
        bad.returncode,
        bad.stderr.startswith("trainmedic plan: error: --precision fp8 is not one of fp32"),
    ) == (2, True)
    none = mlp("plan", "--device", "t4")
    assert none.returncode == 2 and "give the build function to plan" in none.stderr


def test_list_devices(tm):
    result = tm("plan", "--list-devices")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["key", "name", "memory", "bandwidth", "family"]
    t4 = next(line for line in lines if line.startswith("t4 "))
    assert t4.split() == ["t4", "NVIDIA", "T4", "14.8", "GiB", "320", "GB/s", "turing"]
    assert {line.split()[0] for line in lines[1 : len(known_devices()) + 1]} == set(known_devices())


def test_the_help_names_the_spec_form(tm):
    result = tm("plan", "--help")
    assert result.returncode == 0 and "PATH.py:FUNCTION" in result.stdout


def test_an_unwritable_json_path_exits_2_before_planning(mlp):
    result = mlp("plan", "model.py", "--device", "t4", "--batch", "8", "--json", "no/such/dir/plan.json")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == (
        "trainmedic plan: error: --json no/such/dir/plan.json: "
        "the folder no/such/dir does not exist; create it or give another path"
    )


# --- --verify and --verify-trace --------------------------------------------------------------

TRUTH = Path(__file__).resolve().parents[1] / "plan" / "gpu_truth" / "h200-2026-11-26"


def test_verify_without_a_gpu_says_so_in_one_line(mlp):
    result = mlp("plan", "model.py", "--device", "h200", "--batch", "8", "--verify")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "--verify runs the step on a CUDA GPU and this machine has none" in result.stderr
    assert "--verify-trace" in result.stderr  # what can be done here instead


def test_a_recorded_trace_verifies_the_plan_of_its_build(tm):
    trace = TRUTH / "traces" / "mlp_adam_b4096.json.gz"
    # Device, batch and precision come from the recording when the command line leaves them out.
    result = tm(
        "plan", str(TRUTH / "models" / "mlp_adam.py"), "--verify-trace", str(trace), "--json", "plan.json"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("Plan for NVIDIA H200 (SXM, 141 GB) (139.8 GiB), batch 4096, fp32")
    assert "Verified against two real steps on NVIDIA H200 (torch 2.11.0+cu130), recorded in" in out
    assert "first divergence: none; every allocation of 1 MiB or more matches the card's, in order" in out
    assert "within the plan's own bound (1% peak, 5% reserved)" in out
    verification = tm.report("plan.json")["verification"]
    assert verification["recorded"]["peak_bytes"] == 740186624
    assert verification["planned"]["peak_phase"] == verification["recorded"]["peak_phase"] == "backward"
    assert abs(verification["peak_error"]) < 0.001 and verification["divergence"] is None


def test_a_trace_of_another_build_is_refused_with_what_it_records(mlp):
    trace = TRUTH / "traces" / "mlp_adam_b4096.json.gz"
    result = mlp("plan", "model.py", "--verify-trace", str(trace))
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        "records models/mlp_adam.py:build at batch 4096, fp32, whose parameters and inputs took 96.2 MiB"
        in result.stderr
    )
    assert "it is a recording of another model" in result.stderr
    assert "--batch 4096 --verify --record TRACE" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--batch", "8", "--verify-trace", "missing.json.gz"],
            "--verify-trace missing.json.gz: no such file",
        ),
        (
            ["--batch", "8", "--verify", "--verify-trace", "t.json"],
            "give --verify (run the step on this machine's GPU) or --verify-trace",
        ),
        (["--batch", "8", "--record", "t.json.gz"], "--record keeps the recording of --verify; add --verify"),
        (
            ["--verify"],
            "give the batch to verify with --batch N (or --max-batch: its answer is then run on the card)",
        ),
        (
            ["--max-batch", "--verify-trace", "t.json"],
            "--verify-trace checks the batch it recorded; --max-batch's answer is checked",
        ),
    ],
)
def test_verify_options_used_wrongly_are_refused_first(mlp, args, message):
    (mlp.cwd / "t.json").write_text("{}")
    result = mlp("plan", "model.py", "--device", "h200", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_trace_of_another_card_is_refused_with_the_card_it_was_recorded_on(tm):
    trace = TRUTH / "traces" / "mlp_adam_b4096.json.gz"
    result = tm("plan", str(TRUTH / "models" / "mlp_adam.py"), "--device", "t4", "--verify-trace", str(trace))
    assert result.returncode == 2
    assert (
        "was recorded on NVIDIA H200 (h200); the plan is for t4" in result.stderr
        and "--device h200" in result.stderr
    )


def test_precision_is_read_in_any_case_when_verifying(tm):
    trace = TRUTH / "traces" / "transformer_sdpa_bf16_b16.json.gz"
    build = Path(__file__).resolve().parents[2] / "benchmarks" / "plan_zoo.py"
    result = tm(
        "plan",
        f"{build}:build_transformer_sdpa",
        "--precision",
        "BF16",
        "--verify-trace",
        str(trace),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr


def test_a_file_that_is_no_trace_is_refused(mlp):
    (mlp.cwd / "t.json").write_text('{"schema": "trainmedic.plan/1"}')
    result = mlp("plan", "model.py", "--device", "h200", "--batch", "8", "--verify-trace", "t.json")
    assert result.returncode == 2
    assert "t.json is not a gpu-alloc-trace/1 document (schema 'trainmedic.plan/1')" in result.stderr


#: A module that reads its command line when imported, as nanoGPT's configurator does.
CONFIGURED = """
import sys
import torch

width = 8
for arg in sys.argv[1:]:
    key, value = arg.removeprefix("--").split("=")  # "plan" (trainmedic's own argv) fails here
    globals()[key] = int(value)


def build(batch_size):
    return dict(model=torch.nn.Linear(1024, width), inputs=torch.randn(batch_size, 1024))
"""


def test_the_module_is_imported_with_no_arguments_or_the_ones_after_the_double_dash(tm):
    tm.script("configured.py", CONFIGURED)
    plain = tm("plan", "configured.py", "--device", "t4", "--batch", "8", "--json", "plain.json")
    assert plain.returncode == 0, plain.stderr
    wide = tm(
        "plan", "configured.py", "--device", "t4", "--batch", "8", "--json", "wide.json", "--", "--width=4096"
    )
    assert wide.returncode == 0, wide.stderr
    parameters = [tm.report(name)["breakdown"]["parameters"] for name in ("plain.json", "wide.json")]
    assert parameters[1] > 100 * parameters[0]  # 1024 x 4096 weights, not 1024 x 8


def test_a_module_whose_argparse_exits_at_import_is_a_usage_error_naming_its_line(tm):
    path = tm.script(
        "parsed.py",
        """
        import argparse
        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--width", type=int, required=True)
        args = parser.parse_args()


        def build(batch_size):
            return dict(model=torch.nn.Linear(16, args.width), inputs=torch.randn(batch_size, 16))
        """,
    )
    bare = tm("plan", "parsed.py", "--device", "t4", "--batch", "8")
    assert bare.returncode == 2 and "Traceback" not in bare.stderr
    assert "the following arguments are required: --width" in bare.stderr  # argparse's own line
    assert f"called sys.exit(2) (at {os.path.realpath(path)}:6)" in bare.stderr
    assert "trainmedic plan parsed.py:build ... -- --config=small.py" in bare.stderr
    given = tm("plan", "parsed.py", "--device", "t4", "--batch", "8", "--", "--width", "32")
    assert given.returncode == 0, given.stderr
