"""The two inline SVG charts of a tuning page: throughput against batch size, and the roofline.

Drawn here by hand, as the run report's charts are, so the page needs no script, no CDN and no
network: hover text is an SVG ``<title>``. One colour per precision in both charts (and in the
table), so that bf16 is the same orange wherever it appears. Every string that came from the
result (labels, reasons) is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trainmedic.run.report.html import esc, nice_axis
from trainmedic.tune.console import (
    format_span,
)
from trainmedic.tune.model import PRECISIONS, Config, Roofline, Row, TuneResult
from trainmedic.units import finite, format_bandwidth, format_flops
from trainmedic.units import format_sig3 as sig3

__all__ = ["PRECISION_COLORS", "color", "roofline_chart", "series_of", "throughput_chart"]

PRECISION_COLORS = {"fp32": "#1c7ed6", "tf32": "#0c8599", "bf16": "#e8590c", "fp16": "#7048e8"}
OTHER_COLOR = "#868e96"
INK = "#1f2933"
# Eager and compiled runs of one precision share its colour; the dash tells them apart.
_DASHES = {(False, False): "", (True, False): "7 4", (False, True): "2 4", (True, True): "10 4 2 4"}
_W = 1000


def color(precision: str) -> str:
    return PRECISION_COLORS.get(precision, OTHER_COLOR)


def series_of(config: Config) -> str:
    """Everything that names a configuration but its batch size: ``bf16 · compile``.

    A script's configuration is its overrides; the one whose value is the batch size is dropped
    (the first such, as a guess: the model does not say which override names the batch).
    """
    if config.overrides:
        rest = list(config.overrides)
        for i, (_, value) in enumerate(rest):
            if config.batch_size is not None and value == str(config.batch_size):
                del rest[i]
                break
        return " ".join(f"{name}={value}" for name, value in rest) or "all runs"
    parts = [config.precision] + (["compile"] if config.compile else [])
    if config.memory_format != "contiguous":
        parts.append(config.memory_format)
    return " · ".join(parts)


def _dash(config: Config) -> str:
    return _DASHES[(config.compile, config.memory_format != "contiguous")]


def _key_svg(col: str, dash: str = "", marker: bool = True) -> str:
    """A 30 x 12 legend sample: the series' line and marker."""
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    dot = f'<circle cx="15" cy="6" r="3.5" fill="{col}"/>' if marker else ""
    return (
        f'<svg class="key" viewBox="0 0 30 12" width="30" height="12"><line x1="0" y1="6" x2="30" y2="6" '
        f'stroke="{col}" stroke-width="2"{dash_attr}/>{dot}</svg>'
    )


# --- throughput against batch size -------------------------------------------------------------


def _batch(row: Row) -> int:
    """The batch size of a row the throughput chart kept: those without one were left out first."""
    assert row.config.batch_size is not None
    return row.config.batch_size


def throughput_chart(result: TuneResult) -> str:
    """The chart and its legend; a note instead when nothing with a batch size was measured."""
    rows = [r for r in result.rows if r.config.batch_size is not None and r.config.batch_size > 0]
    measured = [r for r in rows if r.status == "measured" and r.measurement is not None]
    if not measured:
        return (
            '<p class="note" id="throughput-empty">No configuration with a known batch size was measured, '
            "so there is no throughput to plot.</p>"
        )
    unit = result.unit
    series: dict[str, list[Row]] = {}
    for row in sorted(rows, key=lambda r: (_precision_rank(r.config.precision), r.config.batch_size or 0)):
        series.setdefault(series_of(row.config), []).append(row)
    batches = sorted({r.config.batch_size for r in rows if r.config.batch_size})
    h, left, right, top, bottom = 380, 76, 24, 28, 50
    pw, ph = _W - left - right, h - top - bottom
    lo, hi = math.log2(batches[0]), math.log2(batches[-1])
    pad = 0.5 if hi > lo else 1.0
    span = hi - lo + 2 * pad
    tick, ymax = nice_axis(max(r.measurement.high for r in measured if r.measurement))

    def xs(b: float) -> float:
        return left + (math.log2(b) - lo + pad) / span * pw

    def ys(v: float) -> float:
        return top + ph - v / ymax * ph

    out = [_nofit_zone(rows, batches, xs, left, top, ph, _W - right)]
    k = 0.0
    while k <= ymax + tick / 2:
        out.append(
            f'<line x1="{left}" x2="{_W - right}" y1="{ys(k):.1f}" y2="{ys(k):.1f}" stroke="#e4e7eb"/>'
            f'<text x="{left - 8}" y="{ys(k) + 4:.1f}" text-anchor="end">{esc(sig3(k) if k else "0")}</text>'
        )
        k += tick
    shown = batches if len(batches) <= 16 else [b for b in batches if b & (b - 1) == 0]
    for b in shown:
        out.append(
            f'<line x1="{xs(b):.1f}" x2="{xs(b):.1f}" y1="{top + ph}" y2="{top + ph + 5}" stroke="#9aa5b1"/>'
            f'<text x="{xs(b):.1f}" y="{top + ph + 19}" text-anchor="middle">{b}</text>'
        )
    out.append(
        f'<line x1="{left}" x2="{_W - right}" y1="{top + ph}" y2="{top + ph}" stroke="#9aa5b1"/>'
        f'<text x="{left + pw / 2}" y="{h - 6}" text-anchor="middle">batch size (log scale)</text>'
        f'<text transform="translate(16 {top + ph / 2}) rotate(-90)" text-anchor="middle">{unit}</text>'
    )
    stacked: dict[int, int] = {}  # hollow markers at one batch stack upwards instead of hiding each other
    for name, members in series.items():
        col = color(members[0].config.precision)
        dash = _dash(members[0].config)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        done = [(r, r.measurement) for r in members if r.status == "measured" and r.measurement]
        parts = []
        if done:
            points = " ".join(f"{xs(_batch(r)):.1f},{ys(m.samples_per_s):.1f}" for r, m in done)
            parts.append(
                f'<polyline class="line" points="{points}" fill="none" stroke="{col}" '
                f'stroke-width="2"{dash_attr}/>'
            )
        for r, m in done:
            x = xs(_batch(r))
            tip = (
                f"{r.config.label}: {sig3(m.samples_per_s)} {unit} (trials {sig3(m.low)}–{sig3(m.high)}, "
                f"±{m.spread:.1%}); first step {format_span(m.first_step_s)}"
            )
            parts.append(
                f'<g class="point"><title>{esc(tip)}</title>'
                f'<line class="err" x1="{x:.1f}" x2="{x:.1f}" y1="{ys(m.low):.1f}" y2="{ys(m.high):.1f}" '
                f'stroke="{col}" stroke-width="1.5"/>'
                f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{ys(m.low):.1f}" y2="{ys(m.low):.1f}" stroke="{col}"/>'
                f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{ys(m.high):.1f}" y2="{ys(m.high):.1f}" stroke="{col}"/>'
                f'<circle class="pt" cx="{x:.1f}" cy="{ys(m.samples_per_s):.1f}" r="5" fill="{col}"/></g>'
            )
        for r in members:
            if r.status not in ("skipped", "failed"):
                continue  # not run: nothing is known about it, so nothing is drawn
            b = _batch(r)
            x, y = xs(b), float(top + ph - 8 - 13 * stacked.get(b, 0))
            stacked[b] = stacked.get(b, 0) + 1
            tip = esc(f"{r.config.label}: {r.status} — {r.reason or 'no reason recorded'}")
            if r.status == "skipped":
                parts.append(
                    f'<circle class="skip" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#fff" stroke="{col}" '
                    f'stroke-width="2"><title>{tip}</title></circle>'
                )
            else:
                parts.append(
                    f'<path class="fail" d="M{x - 4:.1f} {y - 4:.1f}L{x + 4:.1f} {y + 4:.1f}M{x - 4:.1f} '
                    f'{y + 4:.1f}L{x + 4:.1f} {y - 4:.1f}" stroke="{col}" stroke-width="2.5">'
                    f"<title>{tip}</title></path>"
                )
        out.append(f'<g class="series" data-series="{esc(name)}">{"".join(parts)}</g>')
    for r in measured:
        tag = "best" if r.config == result.best else "tie" if r.config in result.ties else ""
        if not tag or r.measurement is None:
            continue
        x, y = xs(_batch(r)), ys(r.measurement.samples_per_s)
        # Best's label goes above its point, a tie's below: they often share a batch size.
        dy, dash = (-15, "") if tag == "best" else (24, ' stroke-dasharray="3 2"')
        out.append(
            f'<circle class="{tag}" cx="{x:.1f}" cy="{y:.1f}" r="10" fill="none" stroke="{INK}" '
            f'stroke-width="2"{dash}/><text x="{x:.1f}" y="{y + dy:.1f}" text-anchor="middle" '
            f'style="fill:{INK};font-weight:600">{tag}</text>'
        )
    svg = (
        f'<svg id="throughput-chart" viewBox="0 0 {_W} {h}" role="img" '
        f'aria-label="{unit} against batch size">{"".join(out)}</svg>'
    )
    drawn = {name: m for name, m in series.items() if any(r.status != "not_run" for r in m)}
    legend = "".join(
        f"<li>{_key_svg(color(m[0].config.precision), _dash(m[0].config))}{esc(name)}</li>"
        for name, m in drawn.items()
    )
    if any(r.status == "skipped" for r in rows):
        legend += '<li><span class="sym hollow"></span>skipped (the plan says it does not fit)</li>'
    if any(r.status == "failed" for r in rows):
        legend += '<li><span class="sym">×</span>failed</li>'
    return (
        f'{svg}<ul class="legend">{legend}</ul><p class="note">Error bars span the fastest and slowest '
        "trial. Hover a point for its numbers.</p>"
    )


def _nofit_zone(
    rows: list[Row],
    batches: list[int],
    xs: Callable[[float], float],
    left: float,
    top: float,
    ph: float,
    right: float,
) -> str:
    """Shade the batch sizes from which nothing was measured and at least one was skipped."""
    measured = {r.config.batch_size for r in rows if r.status == "measured"}
    start = None
    for b in reversed(batches):
        if b in measured:
            break
        start = b
    if start is None or not any(r.status == "skipped" and _batch(r) >= start for r in rows):
        return ""
    i = batches.index(start)
    x0 = left if i == 0 else (xs(batches[i - 1]) + xs(start)) / 2
    return (
        f'<g class="nofit"><title>batch {start} and up: not measured (skipped or failed)</title>'
        f'<rect x="{x0:.1f}" y="{top}" width="{right - x0:.1f}" height="{ph}" fill="#f1f3f5"/>'
        f'<text x="{(x0 + right) / 2:.1f}" y="{top + 16}" text-anchor="middle">does not fit</text></g>'
    )


def _precision_rank(precision: str) -> int:
    return PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


# --- roofline ----------------------------------------------------------------------------------


def roofline_chart(result: TuneResult) -> str:
    """Achieved FLOP/s against arithmetic intensity under the device's roofs, both axes log."""
    pts: list[tuple[Row, Roofline]] = [
        (r, r.roofline)
        for r in result.rows
        if r.status == "measured"
        and r.roofline is not None
        and finite(r.roofline.intensity)
        and r.roofline.intensity > 0
        and r.roofline.achieved_flops > 0
    ]
    if not pts:
        return (
            '<p class="note" id="roofline-empty">No measured configuration has a roofline (unknown '
            "ceilings or no FLOP count), so there is no roofline chart.</p>"
        )
    # The rows' own roofs, not the ceilings': each share in the table was computed against them.
    roofs: dict[str, float] = {}
    for r, rl in sorted(pts, key=lambda p: _precision_rank(p[0].config.precision)):
        roofs.setdefault(r.config.precision, rl.peak_flops)
    bw = result.ceilings.bandwidth_bytes_per_s if result.ceilings else pts[0][1].bandwidth_bytes_per_s
    ridges = [p / bw for p in roofs.values()] if bw > 0 else []
    x_lo, x_hi = _decades([rl.intensity for _, rl in pts] + ridges, 2.0)
    y_lo, y_hi = _decades([rl.achieved_flops for _, rl in pts] + list(roofs.values()), 1.5)
    h, left, right, top, bottom = 420, 112, 24, 20, 50
    pw, ph = _W - left - right, h - top - bottom

    def xs(v: float) -> float:
        return left + (math.log10(v) - x_lo) / (x_hi - x_lo) * pw

    def ys(v: float) -> float:
        return top + ph - (math.log10(v) - y_lo) / (y_hi - y_lo) * ph

    out = []
    for d in range(x_lo, x_hi + 1):
        out.append(
            f'<line x1="{xs(10**d):.1f}" x2="{xs(10**d):.1f}" y1="{top}" y2="{top + ph}" stroke="#e4e7eb"/>'
            f'<text x="{xs(10**d):.1f}" y="{top + ph + 19}" text-anchor="middle">{_decade(d)}</text>'
        )
    for d in range(y_lo, y_hi + 1):
        out.append(
            f'<line x1="{left}" x2="{_W - right}" y1="{ys(10**d):.1f}" y2="{ys(10**d):.1f}" stroke="#e4e7eb"/>'
            f'<text x="{left - 8}" y="{ys(10**d) + 4:.1f}" text-anchor="end">{_decade_flops(d)}</text>'
        )
    out.append(
        f'<text x="{left + pw / 2}" y="{h - 6}" text-anchor="middle">arithmetic intensity (FLOP/B, log scale)'
        f'</text><text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
        "achieved FLOP/s (log scale)</text>"
    )
    if bw > 0:
        x_a = max(10.0**x_lo, 10.0**y_lo / bw)
        x_b = min(10.0**x_hi, max(roofs.values()) / bw)
        if x_b > x_a:
            (x1, y1), (x2, y2) = (xs(x_a), ys(x_a * bw)), (xs(x_b), ys(x_b * bw))
            angle = math.degrees(math.atan2(y2 - y1, x2 - x1))
            lx, ly = x1 + (x2 - x1) * 0.3, y1 + (y2 - y1) * 0.3
            out.append(
                f'<g class="roof roof-bandwidth"><title>memory bandwidth roof: {esc(format_bandwidth(bw))}</title>'
                f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#495057" '
                f'stroke-width="2.5"/><text transform="translate({lx:.1f} {ly - 8:.1f}) rotate({angle:.1f})" '
                f'style="fill:#495057">memory {esc(format_bandwidth(bw))}</text></g>'
            )
    seen: dict[float, list[str]] = {}
    for precision, peak in roofs.items():
        seen.setdefault(peak, []).append(precision)
        col = color(precision)
        # Precisions with one peak (bf16 and fp16) draw one line: the second dashed over the first.
        dash = ' stroke-dasharray="8 8"' if len(seen[peak]) > 1 else ""
        x0 = xs(min(max(peak / bw, 10.0**x_lo), 10.0**x_hi)) if bw > 0 else left
        tip = f"{precision} roof: {format_flops(peak)}" + (
            f"; ridge at {sig3(peak / bw)} FLOP/B" if bw > 0 else ""
        )
        out.append(
            f'<g class="roof roof-{esc(precision)}" data-precision="{esc(precision)}"><title>{esc(tip)}</title>'
            f'<line x1="{x0:.1f}" y1="{ys(peak):.1f}" x2="{_W - right}" y2="{ys(peak):.1f}" stroke="{col}" '
            f'stroke-width="2.5"{dash}/></g>'
        )
    for peak, names in seen.items():
        out.append(
            f'<text x="{_W - right - 4}" y="{ys(peak) - 6:.1f}" text-anchor="end" style="fill:'
            f'{color(names[0])};font-weight:600">{esc(" · ".join(names))} {esc(format_flops(peak))}</text>'
        )
    for r, rl in pts:
        x, y = xs(rl.intensity), ys(rl.achieved_flops)
        tip = (
            f"{r.config.label}: {sig3(rl.intensity)} FLOP/B, {format_flops(rl.achieved_flops)} achieved, "
            f"{rl.share_of_ceiling:.0%} of the {format_flops(rl.attainable_flops)} roof above it ({rl.bound}-bound)"
        )
        ring = ""
        if r.config == result.best:
            ring = f'<circle class="best" cx="{x:.1f}" cy="{y:.1f}" r="11" fill="none" stroke="{INK}" stroke-width="2"/>'
        out.append(
            f'<g class="rl-point"><title>{esc(tip)}</title>{ring}<circle class="rl-pt" cx="{x:.1f}" '
            f'cy="{y:.1f}" r="6" fill="{color(r.config.precision)}" stroke="#fff" stroke-width="1.5"/></g>'
        )
    svg = (
        f'<svg id="roofline-chart" viewBox="0 0 {_W} {h}" role="img" '
        f'aria-label="achieved FLOP/s against arithmetic intensity">{"".join(out)}</svg>'
    )
    legend = "".join(
        f'<li><span class="sw" style="background:{color(p)}"></span>{esc(p)}</li>' for p in roofs
    )
    legend += f"<li>{_key_svg('#495057', marker=False)}memory bandwidth</li>"
    return (
        f'{svg}<ul class="legend">{legend}</ul><p class="note">Left of a roof\'s corner a configuration is '
        "bandwidth-bound, right of it compute-bound. Ringed: the best. Hover a point for its numbers.</p>"
    )


def _decades(values: list[float], margin: float) -> tuple[int, int]:
    """Whole powers of ten around ``values``, with a margin, and at least one decade wide."""
    vals = [v for v in values if finite(v) and v > 0]
    lo = math.floor(math.log10(min(vals) / margin))
    hi = math.ceil(math.log10(max(vals) * margin))
    return lo, max(hi, lo + 1)


def _decade(d: int) -> str:
    """``0.01``, ``1``, ``100``, ``10k``: a power of ten as an axis label."""
    if d >= 6:
        return f"{10 ** (d - 6):g}M"
    if d >= 3:
        return f"{10 ** (d - 3):g}k"
    return f"{10.0**d:g}"


def _decade_flops(d: int) -> str:
    for exp, unit in ((15, "PFLOP/s"), (12, "TFLOP/s"), (9, "GFLOP/s"), (6, "MFLOP/s")):
        if d >= exp:
            return f"{10 ** (d - exp):g} {unit}"
    return f"{10.0**d:g} FLOP/s"
