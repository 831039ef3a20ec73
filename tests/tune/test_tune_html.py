"""The ``trainmedic tune`` HTML page: well-formed, self-contained, escaped, and its charts true to the rows."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from browser_kit import NETWORK_REF
from test_tune_console import empty_result, mlp_result, unet3d_result

from trainmedic.tune.charts import PRECISION_COLORS
from trainmedic.tune.html import render_tune_html, write_tune_html
from trainmedic.tune.model import Config, Measurement, Roofline, Row, TuneResult

VOID = {"meta", "link", "br", "img", "input", "hr", "wbr", "source", "col", "area", "base", "embed", "track"}
HOSTILE = "<script>alert(1)</script>"
FIXTURES = [unet3d_result, mlp_result, empty_result]


class _Nesting(HTMLParser):
    """Every tag closed, in order: what a browser forgives and a diff of the page would not."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass  # <line/>, <circle/>: closed where opened

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def _svg(page: str, chart: str) -> ET.Element:
    """One chart, parsed as XML: SVG written into HTML must still be well-formed XML."""
    match = re.search(rf'<svg id="{chart}".*?</svg>', page, re.DOTALL)
    assert match, f"no {chart}"
    return ET.fromstring(match.group(0))


def _by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(tag) if cls in (e.get("class") or "").split()]


def hostile_result() -> TuneResult:
    r = unet3d_result()
    r.target = HOSTILE
    r.device = 'cuda:0 ("<b>fake</b>")'
    r.verdict = "batch 2 & <i>bf16</i> wins"
    r.why = ["<img src=x onerror=alert(1)>"]
    r.change = 'x = f["<x>"] & y'
    r.rows[3].reason = "<script>alert(2)</script>"
    r.notes, r.warnings = ["<u>note</u>"], ["<s>warn</s>"]
    m = Measurement((4.0, 4.1, 4.2), 10, 1.0)
    r.rows.append(
        Row(Config(2, "bf16", overrides=(("model", "<svg onload=alert(3)>"), ("bs", "2"))), "measured", m)
    )
    return r


@pytest.mark.parametrize("make", [*FIXTURES, hostile_result])
def test_page_is_well_formed_and_self_contained(make):
    page = render_tune_html(make())
    assert page.startswith("<!doctype html>")
    parser = _Nesting()
    parser.feed(page)
    parser.close()
    assert parser.errors == [] and parser.stack == []
    for chart in re.findall(r'<svg id="([a-z-]+)"', page):
        _svg(page, chart)
    assert not NETWORK_REF.search(page)
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()
    assert "<link" not in page.replace('<link rel="icon" href="data:,">', "")


def test_every_user_string_is_escaped():
    page = render_tune_html(hostile_result())
    for raw in (
        HOSTILE,
        "<script>alert(2)",
        "<b>fake</b>",
        "<i>bf16</i>",
        "<img src=x",
        '["<x>"]',
        "<u>",
        "<s>",
        "<svg onload",
    ):
        assert raw not in page, raw
    assert "<title>trainmedic tune: &lt;script&gt;alert(1)&lt;/script&gt;</title>" in page
    assert '<code class="cmd">&lt;script&gt;alert(1)&lt;/script&gt;</code>' in page
    assert "batch 2 &amp; &lt;i&gt;bf16&lt;/i&gt; wins" in page
    assert "x = f[&quot;&lt;x&gt;&quot;] &amp; y" in page
    assert (
        'data-series="model=&lt;svg onload=alert(3)&gt;"' in page
    )  # bs=2 is the batch, dropped from the series


@pytest.mark.parametrize(
    "make, series",
    [
        (unet3d_result, ["fp32", "bf16", "bf16 · compile · channels_last_3d"]),
        (mlp_result, ["fp32", "bf16"]),  # the not-run series draw nothing
    ],
)
def test_one_polyline_per_series_and_one_point_per_measured_row(make, series):
    result = make()
    chart = _svg(render_tune_html(result), "throughput-chart")
    groups = _by_class(chart, "g", "series")
    drawn = [g.get("data-series") for g in groups if _by_class(g, "polyline", "line")]
    assert drawn == series
    assert len(_by_class(chart, "polyline", "line")) == len(series)
    assert len(_by_class(chart, "circle", "pt")) == len(result.measured)
    assert len(_by_class(chart, "line", "err")) == len(result.measured)
    # One colour per precision: the bf16 line is bf16's orange, the fp32 line fp32's blue.
    for g in groups:
        line = _by_class(g, "polyline", "line")
        if line:
            assert line[0].get("stroke") == PRECISION_COLORS[g.get("data-series").split(" ")[0]]


def test_best_tie_and_what_was_not_measured_are_marked():
    page = render_tune_html(unet3d_result())
    chart = _svg(page, "throughput-chart")
    assert len(_by_class(chart, "circle", "best")) == 1 and len(_by_class(chart, "circle", "tie")) == 1
    assert len(_by_class(chart, "circle", "skip")) == 1 and len(_by_class(chart, "path", "fail")) == 1
    assert _by_class(chart, "g", "nofit"), "batch 8 was measured nowhere: its zone is shaded"
    assert (
        "skipped (the plan says it does not fit)" in page
        and '<li><span class="sym">×</span>failed</li>' in page
    )
    assert re.search(r'<tr class="best"><td>.*?batch 2 · bf16</td>', page)
    assert re.search(r'<tr class="tie"><td>.*?batch 2 · bf16 · compile · channels_last_3d</td>', page)
    assert (
        '<span class="status status-skipped">skipped</span>the plan needs 91.3 GiB of 75.3 GiB usable' in page
    )
    assert "2.19x faster" in page and "2.19x faster than batch 4 · fp32 (largest batch that fits)" in page
    mlp = render_tune_html(mlp_result())
    assert not _by_class(_svg(mlp, "throughput-chart"), "g", "nofit")  # not run is not "does not fit"
    assert (
        "stopped early: the budget of 2m ran out after 4 measured configurations (4 of 6 measured, 2 not run)"
        in mlp
    )
    assert 'class="badge warn">12.0x faster · stopped early<' in mlp


@pytest.mark.parametrize(
    "make, precisions, bound",
    [(unet3d_result, ["fp32", "bf16"], "bandwidth"), (mlp_result, ["fp32", "bf16"], "compute")],
)
def test_roofline_has_a_roof_per_precision_and_a_point_per_measured_row(make, precisions, bound):
    result = make()
    chart = _svg(render_tune_html(result), "roofline-chart")
    roofs = [g.get("data-precision") for g in _by_class(chart, "g", "roof") if g.get("data-precision")]
    assert roofs == precisions
    assert len(_by_class(chart, "g", "roof-bandwidth")) == 1
    for g in _by_class(chart, "g", "roof"):
        if g.get("data-precision"):
            assert g.find("line").get("stroke") == PRECISION_COLORS[g.get("data-precision")]
    points = _by_class(chart, "circle", "rl-pt")
    assert len(points) == len(result.measured)
    tips = [g.find("title").text for g in _by_class(chart, "g", "rl-point")]
    assert len(tips) == len(points) and all(t.endswith(f"({bound}-bound)") for t in tips)
    assert len(_by_class(chart, "circle", "best")) == 1


def test_bf16_and_fp16_with_one_peak_share_a_label():
    r = mlp_result()
    r.rows[5] = Row(Config(4096, "fp16"), "measured", r.rows[0].measurement, r.rows[0].roofline)
    page = render_tune_html(r)
    assert "bf16 · fp16 990 TFLOP/s" in page
    assert 'class="roof roof-fp16"' in page


def test_nothing_measured_says_so_instead_of_charts():
    page = render_tune_html(empty_result())
    assert 'id="throughput-chart"' not in page and 'id="roofline-chart"' not in page
    assert 'id="throughput-empty"' in page and 'id="roofline-empty"' in page
    assert 'class="badge bad">nothing measured<' in page
    assert "No verdict: nothing was measured." in page


def test_write_tune_html_is_atomic(tmp_path):
    out = write_tune_html(unet3d_result(), tmp_path / "sub" / "tune.html")
    assert out == tmp_path / "sub" / "tune.html"
    assert out.read_text(encoding="utf-8") == render_tune_html(unet3d_result())
    assert [p.name for p in out.parent.iterdir()] == ["tune.html"]


@pytest.mark.chromium
def test_charts_render_in_chromium(driver, tmp_path):
    for make in (unet3d_result, hostile_result):
        path = write_tune_html(make(), tmp_path / f"{make.__name__}.html")
        driver.get(path.as_uri())
        sizes = driver.execute_script(
            "return ['throughput-chart', 'roofline-chart'].map(id => {"
            "const r = document.getElementById(id).getBoundingClientRect(); return [r.width, r.height]; })"
        )
        assert all(w > 600 and h > 200 for w, h in sizes), sizes
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 1280
        assert driver.execute_script("return document.scripts.length") == 0
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []


def test_a_script_result_plots_by_its_batch_override_and_skips_missing_rooflines():
    base, big = (Config(b, overrides=(("lr", "0.1"), ("batch-size", str(b)))) for b in (64, 128))
    r = TuneResult(
        "train.py --epochs 1",
        "cpu",
        None,
        best=big,
        baseline=base,
        baseline_source="yours",
        rows=[
            Row(base, "measured", Measurement((3.0, 3.1, 3.2), 10, 1.5)),
            Row(big, "measured", Measurement((5.0,), 10, 0.2), Roofline(1e9, 1e8, 850e9, 51.2e9, 4e8)),
        ],
    )
    page = render_tune_html(r)
    chart = _svg(page, "throughput-chart")
    assert [g.get("data-series") for g in _by_class(chart, "g", "series")] == ["lr=0.1"]
    assert len(_by_class(chart, "circle", "pt")) == 2
    roofline = _svg(page, "roofline-chart")
    assert len(_by_class(roofline, "circle", "rl-pt")) == 1  # the row without a roofline is not placed
    assert [g.get("data-precision") for g in _by_class(roofline, "g", "roof") if g.get("data-precision")] == [
        "fp32"
    ]
    assert "1.61x faster than lr=0.1 batch-size=64 (yours)" in page
