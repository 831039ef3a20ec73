"""The HTML report: self-contained, escaped, and actually rendering in a real browser."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import pytest
from browser_kit import NETWORK_REF

from trainmedic.categories import CATEGORIES
from trainmedic.run.report.html import MAX_BARS, render_html, write_html
from trainmedic.run.report.model import DeviceInfo, Finding, LineCost, Report, StepStats, TimelinePoint


def _timeline(n: int, step_s: float = 36.5, seed: int = 0) -> list[TimelinePoint]:
    rng = random.Random(seed)
    points = []
    for i in range(n):
        secs = step_s * rng.uniform(0.95, 1.08)
        data = secs * 0.986
        points.append(
            TimelinePoint(
                step=10 + i,
                seconds=secs,
                categories={
                    "data": data,
                    "transfer": secs * 0.002,
                    "compute": secs * 0.009,
                    "host_other": secs * 0.003,
                },
            )
        )
    return points


def data_bound_report(points: int = 40) -> Report:
    """Seed 000: an HDF5 read per batch, 36.5 s a step, the GPU idle."""
    return Report(
        command=["python", "train_receiver.py", "--epochs", "20", "--data", "/scratch/rx dataset.h5"],
        exit_code=0,
        outcome="step_limit",
        device=DeviceInfo("cuda", "NVIDIA RTX A6000", {"memory_gib": 48}),
        steps=StepStats(count=points, median_s=36.5, p90_s=38.9, growth=1.01, warmup=3, source="optimizer"),
        breakdown={
            "data": 0.986,
            "transfer": 0.002,
            "tiny_ops": 0.0,
            "sync": 0.0,
            "compute": 0.009,
            "memory_bandwidth": 0.0,
            "host_other": 0.003,
        },
        bottleneck="data",
        findings=[
            Finding(
                category="data",
                share=0.986,
                title="Every batch is read from HDF5 on the training thread",
                evidence="h5py Dataset.__getitem__ takes 36.0 s of a 36.5 s step (98.6%); GPU busy 0.9%; "
                "reads use an unsorted fancy index over 1,024 rows",
                where="train_receiver.py:88",
                fix="cache = trainmedic.data.cache('/scratch/rx dataset.h5', tier='ram') — load once, then gather",
                expected_speedup=41.7,
                ceiling=71.4,
                kind="hdf5",
            )
        ],
        wall_s=1581.2,
        setup_s=42.7,
        timeline=_timeline(points),
        lines=[
            LineCost("train_receiver.py:88", "data", "hdf5", 35.99, 0.986),
            LineCost("train_receiver.py:121", "compute", "", 0.33, 0.009),
            LineCost("train_receiver.py:130", "host_other", "logging", 0.11, 0.003),
            LineCost("train_receiver.py:119", "transfer", "pageable", 0.07, 0.002),
        ],
        notes=["3 warm-up steps were excluded.", "Stopped after 40 steady-state steps (--steps 40)."],
        version="0.1.0",
    )


def empty_report() -> Report:
    """A job that died before its first step, with hostile strings everywhere."""
    return Report(
        command=["python", "<script>alert(1)</script>.py"],
        exit_code=1,
        outcome="exception",
        device=DeviceInfo("cpu", "AMD <b>EPYC</b>"),
        steps=StepStats(count=0, median_s=0.0, p90_s=0.0, growth=float("nan")),
        breakdown={c: 0.0 for c in CATEGORIES},
        bottleneck="",
        findings=[],
        message='RuntimeError: bad "shape" <script>alert(1)</script> & more',
        notes=["<img src=x onerror=alert(1)>"],
    )


def unbounded_report() -> Report:
    r = data_bound_report()
    f = r.findings[0]
    r.findings = [
        Finding(
            f.category, 1.0, "<script>alert(1)</script>", f.evidence, None, f.fix, 8.0, float("inf"), f.kind
        )
    ]
    return r


# --- pure Python --------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [data_bound_report, empty_report, unbounded_report])
def test_page_is_self_contained(make):
    page = render_html(make())
    assert page.startswith("<!doctype html>")
    assert not NETWORK_REF.search(page)
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()  # no script at all, so none to fetch or to break
    assert "<link" not in page.replace('<link rel="icon" href="data:,">', "")


def test_user_strings_are_escaped():
    page = render_html(empty_report())
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<b>EPYC</b>" not in page
    assert "bad &quot;shape&quot;" in page and "&amp; more" in page
    titled = render_html(unbounded_report())
    assert "<h3>&lt;script&gt;alert(1)&lt;/script&gt;</h3>" in titled


def test_every_category_is_in_the_legend_in_order():
    page = render_html(data_bound_report())
    legend = re.search(r'<ul class="legend" id="breakdown-legend">(.*?)</ul>', page, re.S).group(1)
    positions = [legend.find(f"{c} <b>") for c in CATEGORIES]
    assert all(p >= 0 for p in positions), positions
    assert positions == sorted(positions)
    assert "98.6%" in legend


def test_header_findings_and_lines():
    page = render_html(data_bound_report())
    for text in [
        "python train_receiver.py --epochs 20 --data &#x27;/scratch/rx dataset.h5&#x27;",
        "step_limit · exit 0",
        "NVIDIA RTX A6000 (cuda)",
        "26 min 21 s",
        "42.7 s",
        "36.5 s",
        "38.9 s",
        "×1.01",
        "0.1.0",
        "Bottleneck: <strong",
        "×41.7 (ceiling ×71.4)",
        "<code>train_receiver.py:88</code>",
        "36 s",
        "ms / step",
        "3 warm-up steps were excluded.",
    ]:
        assert text in page, text
    assert 'id="breakdown-chart"' in page and 'id="timeline-chart"' in page


def test_a_close_call_heads_the_breakdown_with_both_levers():
    report = dataclasses.replace(data_bound_report(), close_call=["data", "compute"])
    page = render_html(report)
    head = re.search(r'<p class="bottleneck">(.*?)</p>', page).group(1)
    assert head.startswith("Bottleneck: too close to call")
    assert ">data</strong>" in head and ">compute</strong>" in head
    assert "Bottleneck: too close to call" not in render_html(data_bound_report())


def test_a_finding_that_is_the_whole_step_states_no_ceiling():
    page = render_html(unbounded_report())
    assert "×8.0 (all of the step is this finding)" in page
    assert "unbounded" not in page
    assert "100.0%" in page


def test_empty_timeline_says_so():
    page = render_html(empty_report())
    assert 'id="timeline-chart"' not in page
    assert "No steady-state steps were measured" in page
    assert "No findings" in page
    assert 'id="breakdown-chart"' in page
    assert 'class="bar' not in page


@pytest.mark.parametrize("n", [1, 2, 399, 400, 401, 2000, 5000])
def test_timeline_bars_are_bounded(n):
    report = data_bound_report(points=n)
    page = render_html(report)
    chart = re.search(r'<svg id="timeline-chart".*?</svg>', page, re.S).group(0)
    columns = chart.count('<g class="col">')
    assert 1 <= columns <= MAX_BARS
    assert columns == min(n, MAX_BARS) or n > MAX_BARS
    assert chart.count('class="bar ') >= columns


def test_single_point_bar_is_not_page_wide():
    chart = re.search(
        r'<svg id="timeline-chart".*?</svg>', render_html(data_bound_report(points=1)), re.S
    ).group(0)
    widths = [float(w) for w in re.findall(r'class="bar [^"]*" x="[^"]*" y="[^"]*" width="([^"]*)"', chart)]
    assert widths and max(widths) <= 48


def test_write_html_is_atomic(tmp_path):
    out = write_html(data_bound_report(), tmp_path / "sub" / "report.html")
    assert out == tmp_path / "sub" / "report.html"
    assert out.read_text(encoding="utf-8") == render_html(data_bound_report())
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


def test_renders_a_report_read_back_from_json():
    r = unbounded_report()
    back = Report.from_dict(json.loads(r.to_json()))  # the JSON writes the inf ceiling as null
    assert back.findings[0].ceiling is None
    assert "(all of the step is this finding)" in render_html(back)


# --- a real browser ---------------------------------------------------------------------------


_MEASURE = """
const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect(); return [r.width, r.height]; };
const bars = (sel) => Array.from(document.querySelectorAll(sel)).map(box).filter(([w, h]) => w > 0 && h > 0).length;
return {
  breakdown: box(document.getElementById('breakdown-chart')),
  timeline: box(document.getElementById('timeline-chart')),
  bars: bars('.bar'),
  breakdownBars: bars('#breakdown-chart .bar'),
  timelineBars: bars('#timeline-chart .bar'),
  empty: box(document.getElementById('timeline-empty')),
  scrollWidth: document.documentElement.scrollWidth,
};
"""


def _open(driver, report: Report, path: Path) -> dict:
    write_html(report, path)
    driver.get(path.as_uri())
    return driver.execute_script(_MEASURE)


def _severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


@pytest.mark.chromium
def test_charts_render_in_chromium(driver, tmp_path):
    m = _open(driver, data_bound_report(), tmp_path / "report.html")
    assert m["breakdown"] and min(m["breakdown"]) > 0, m
    assert m["timeline"] and min(m["timeline"]) > 0, m
    assert m["bars"] > 0 and m["breakdownBars"] > 0 and m["timelineBars"] >= 40, m
    assert m["scrollWidth"] <= 1280, m  # nothing overflows a 1280 px window
    assert _severe(driver) == []
    assert driver.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000


@pytest.mark.chromium
def test_large_and_empty_reports_render_in_chromium(driver, tmp_path):
    m = _open(driver, data_bound_report(points=5000), tmp_path / "big.html")
    assert 0 < m["timelineBars"] and min(m["timeline"]) > 0, m
    assert (
        driver.execute_script("return document.querySelectorAll('#timeline-chart g.col').length") <= MAX_BARS
    )
    m = _open(driver, empty_report(), tmp_path / "empty.html")
    assert m["timeline"] is None and m["empty"] and min(m["empty"]) > 0, m
    assert m["breakdown"] and min(m["breakdown"]) > 0, m
    assert driver.execute_script("return window.__xss === undefined && document.scripts.length === 0")
    assert _severe(driver) == []
    driver.save_screenshot(str(tmp_path / "empty.png"))


def test_a_suggested_call_is_shown_escaped_under_the_fix():
    r = data_bound_report()
    r.findings = [
        dataclasses.replace(r.findings[0], suggestion='data.load("/d/<x>.h5", fields=["x"], batch_size=64)')
    ]
    page = render_html(r)
    assert (
        '<dt>call</dt><dd><code class="cmd">data.load(&quot;/d/&lt;x&gt;.h5&quot;, fields=[&quot;x&quot;], batch_size=64)</code></dd>'
        in page
    )
    assert page.index("<dt>fix</dt>") < page.index("<dt>call</dt>") < page.index("<dt>estimated speedup</dt>")
    assert "<dt>call</dt>" not in render_html(data_bound_report())
