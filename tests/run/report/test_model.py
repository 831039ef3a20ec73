import json
import math

from trainmedic.categories import CATEGORIES
from trainmedic.run.report.model import SCHEMA, DeviceInfo, Finding, Report, StepStats


def report(**overrides):
    base = dict(
        command=["train.py", "--epochs", "3"],
        exit_code=0,
        outcome="completed",
        device=DeviceInfo("cpu", "Xeon", {"name": "not me", "cpu_cores": 2}),
        steps=StepStats(40, 0.5, 0.6, 1.01, 3, "optimizer"),
        breakdown={c: (1.0 if c == "data" else 0.0) for c in CATEGORIES},
        bottleneck="data",
        findings=[Finding("data", 1.0, "t", "e", "train.py:3", "f", 50.0, math.inf, "hdf5")],
    )
    base.update(overrides)
    return Report(**base)


def test_json_has_the_contract_keys_in_order():
    data = json.loads(report().to_json())
    assert data["schema"] == SCHEMA
    assert list(data["breakdown"]) == list(CATEGORIES)
    assert data["device"] == {"name": "Xeon", "cpu_cores": 2, "kind": "cpu"}  # details never override
    finding = data["findings"][0]
    for key in ("category", "share", "title", "evidence", "where", "fix", "expected_speedup"):
        assert key in finding
    assert finding["ceiling"] is None  # infinity is not JSON


def test_non_finite_numbers_never_break_the_json():
    text = report(steps=StepStats(0, 0.0, 0.0, math.nan), wall_s=math.inf).to_json()
    assert json.loads(text)["steps"]["growth"] is None


def test_round_trip_ignores_keys_added_later(tmp_path):
    path = report().write_json(tmp_path / "r.json")
    data = json.loads(path.read_text())
    data["steps"]["added_later"] = 1
    data["findings"][0]["added_later"] = 2
    back = Report.from_dict(data)
    assert back.findings[0].where == "train.py:3"
    assert back.device.details["cpu_cores"] == 2
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_a_close_call_names_both_levers_and_survives_the_round_trip(tmp_path):
    close = report(close_call=["data", "compute"])
    data = json.loads(close.to_json())
    assert (data["bottleneck"], data["close_call"]) == ("data", ["data", "compute"])
    assert Report.from_dict(data).close_call == ["data", "compute"]
    assert json.loads(report().to_json())["close_call"] == []  # a clear lead
    older = json.loads(report().to_json())
    del older["close_call"]  # a report written before the key existed
    assert Report.from_dict(older).close_call == []
