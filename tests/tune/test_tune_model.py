from __future__ import annotations

import json

from trainmedic.tune.model import Config, Measurement, Roofline, Row, TuneResult


def test_a_script_configuration_says_only_what_it_set():
    config = Config(8, overrides=(("batch_size", "8"), ("lr", "0.1")))
    assert config.to_dict() == {"batch_size": 8, "overrides": {"batch_size": "8", "lr": "0.1"}}
    assert Config.from_dict(config.to_dict()) == config
    assert config.label == "batch_size=8 lr=0.1"


def test_the_json_is_valid_with_no_bytes_counted_and_names_its_unit():
    line = Roofline(
        flops_per_step=1e9,
        bytes_per_step=0.0,
        peak_flops=1e11,
        bandwidth_bytes_per_s=1e10,
        achieved_flops=1e9,
        step_s=1.0,
    )
    result = TuneResult(
        "train.py",
        "cpu",
        None,
        rows=[
            Row(
                Config(None, overrides=(("lr", "1"),)), "measured", Measurement((1.0, 1.1, 1.2), 1, 0.5), line
            )
        ],
    )
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["rows"][0]["roofline"]["intensity"] is None and data["unit"] == "steps/s"


def test_a_roofline_is_bound_by_where_its_time_goes_op_by_op():
    common = dict(
        flops_per_step=1e10,
        bytes_per_step=1e8,
        peak_flops=1e11,
        bandwidth_bytes_per_s=1e10,
        achieved_flops=5e9,
        step_s=2.0,
    )
    # 100 FLOP/byte is right of the ridge (10), but most of the roofline time is in bandwidth-bound ops.
    assert Roofline(**common, roofline_s=1.0, bandwidth_share=0.7).bound == "bandwidth"
    assert Roofline(**common, roofline_s=1.0, bandwidth_share=0.3).bound == "compute"
    assert Roofline(**common).bound == "compute"  # without per-op counts: the ridge decides
    assert Roofline(**common, roofline_s=1.0, bandwidth_share=0.3).share_of_ceiling == 0.5
