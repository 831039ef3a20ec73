"""A finding whose fix the run tried: the console, the HTML and the JSON show the measured gain
and the estimate apart; an untried finding says its gain is estimated."""

from __future__ import annotations

import dataclasses
import json

from test_console import render, seed_000_report

from trainmedic.run.report.html import render_html
from trainmedic.run.report.model import MeasuredGain, Report

MEASURED = MeasuredGain(
    gain=3.62,
    low=3.4,
    high=3.9,
    change="batches replayed from memory",
    as_is_steps=8,
    fixed_steps=8,
    as_is_median_s=0.063,
    fixed_median_s=0.0174,
    estimated=1.83,
)


def _confirmed() -> Report:
    report = seed_000_report()
    report.findings[0] = dataclasses.replace(report.findings[0], measured=MEASURED)
    return report


def test_the_console_says_measured_with_both_arms_and_the_estimate_beside():
    text = render(_confirmed())
    assert (
        "    buys      ×3.6 measured: 8 steps with batches replayed from memory ran at 17.4 ms against 63.0\n"
        "              ms (×3.4-×3.9 across block pairs; estimated ×1.8)\n"
    ) in text
    assert "×1.0 estimated (all of the step is this finding)" in text  # the untried one


def test_the_html_shows_measured_and_estimated_apart():
    page = render_html(_confirmed())
    assert page.index("<dt>measured speedup</dt>") < page.index("<dt>estimated speedup</dt>")
    assert "×3.6: 8 steps with batches replayed from memory ran at 17.4 ms" in page
    assert render_html(seed_000_report()).count("<dt>measured speedup</dt>") == 0


def test_the_json_carries_the_measurement_and_reads_it_back(tmp_path):
    report = _confirmed()
    path = tmp_path / "report.json"
    report.write_json(path)
    data = json.loads(path.read_text())
    assert data["findings"][0]["measured"] == dataclasses.asdict(MEASURED)
    assert data["findings"][0]["expected_speedup"] == report.findings[0].expected_speedup
    assert data["findings"][1]["measured"] is None
    back = Report.from_dict(data)
    assert back.findings[0].measured == MEASURED and back.findings[0].gain == 3.62
    assert back.findings[1].measured is None
