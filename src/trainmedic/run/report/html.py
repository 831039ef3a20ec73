"""Render a Report as one self-contained HTML page.

The page is meant to be shared: attached to an issue, uploaded as a CI artefact, opened from a
laptop with no network. So everything lives in the one file: CSS inline, charts drawn here as
inline SVG (hover tooltips are SVG ``<title>`` elements, no script), no fonts, CDNs or fetches.
Every string that came from the user's job (command, paths, messages) is HTML-escaped.
"""

from __future__ import annotations

import html
import math
import shlex
from pathlib import Path

from trainmedic._os import write_text_atomically
from trainmedic.categories import CATEGORIES, DESCRIPTIONS
from trainmedic.run.report.model import Finding, Report, TimelinePoint
from trainmedic.units import format_seconds

__all__ = ["render_html", "write_html"]

#: One fixed colour per category, so the same colour means the same thing in every chart.
COLORS: dict[str, str] = {
    "data": "#e8590c",
    "transfer": "#f2b705",
    "tiny_ops": "#7048e8",
    "sync": "#d6336c",
    "compute": "#2f9e44",
    "memory_bandwidth": "#1c7ed6",
    "host_other": "#868e96",
}
UNATTRIBUTED = "#ced4da"
#: More bars than this are unreadable at 1200 px and make the file heavy; bins average steps.
MAX_BARS = 400
MAX_LINES = 15

BASE_CSS = """
:root{--fg:#1f2933;--muted:#616e7c;--line:#e4e7eb}
*{box-sizing:border-box}
body{margin:0;background:#f5f7fa;color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1140px;margin:0 auto;padding:20px 24px}
section,header{background:#fff;border:1px solid var(--line);border-radius:8px;padding:18px 22px;margin:14px 0}
h1{font-size:22px;margin:0 0 10px}h2{font-size:17px;margin:0 0 12px}h3{font-size:16px;margin:0}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
.cmd{display:block;background:#1f2933;color:#f5f7fa;padding:8px 12px;border-radius:6px;
  white-space:pre-wrap;word-break:break-all}
.badge{display:inline-block;padding:1px 10px;border-radius:999px;font-weight:600;font-size:13px;
  margin-left:8px;vertical-align:middle}
.ok{background:#e3f9e5;color:#1f6a2a}.warn{background:#fff3c4;color:#8d6708}.bad{background:#ffe3e3;color:#a61e1e}
dl.facts{display:grid;grid-template-columns:repeat(4,1fr);gap:10px 24px;margin:14px 0 0}
dt{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}dd{margin:0;font-weight:600}
.bottleneck{font-size:18px;margin:0 0 12px}.bottleneck .desc{display:block;color:var(--muted);font-size:14px}
.legend{display:flex;flex-wrap:wrap;gap:4px 20px;list-style:none;padding:0;margin:10px 0 0;font-size:14px}
.legend li{display:flex;align-items:center;gap:6px}.legend .zero{opacity:.45}
.sw{width:12px;height:12px;border-radius:3px;display:inline-block;flex:none}
svg{display:block;width:100%;height:auto}svg text{font-size:12px;fill:#52606d}
.finding{border:1px solid var(--line);border-left:6px solid;border-radius:6px;padding:12px 16px;margin:10px 0}
.finding header{all:unset;display:flex;gap:12px;align-items:baseline;margin-bottom:8px}
.finding .share{font-size:20px;font-weight:700}
.finding dl{display:grid;grid-template-columns:140px 1fr;gap:4px 12px;margin:0}.finding dd{font-weight:400}
.finding dt{padding-top:2px}
.finding dd.speedup{font-weight:700;color:#1f6a2a}
table{width:100%;border-collapse:collapse;font-size:14px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line)}th{color:var(--muted);font-weight:600}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.note{color:var(--muted);font-style:italic;margin:8px 0 0}
.message{border-left:6px solid #9aa5b1;white-space:pre-wrap}
.bad-edge{border-left-color:#d64545}.warn-edge{border-left-color:#f0b429}
.growing{color:#b44d12}
tr.straggler td{background:#fff3c4;font-weight:600}.bad-text{color:#a61e1e;font-weight:700}
.straggler-text{font-weight:600;margin:0 0 8px}
footer{color:var(--muted);font-size:13px;text-align:center;margin:8px 0 20px}
"""


def render_html(report: Report) -> str:
    """The whole report as one HTML document (a string; nothing is written or printed)."""
    cmd = shlex.join(report.command) if report.command else "(no command)"
    tone = _tone(report)
    message = (
        f'<section class="message {tone}-edge">{esc(report.message)}</section>' if report.message else ""
    )
    body = "".join(
        [
            _header(report, cmd),
            message,
            _breakdown(report),
            _ranks(report),
            _timeline(report),
            _findings(report.findings),
            _lines(report),
            _notes(report.notes),
            f"<footer>trainmedic {esc(report.version or '')} · schema trainmedic.report/1</footer>",
        ]
    )
    return page(f"trainmedic report: {cmd}", BASE_CSS, body)


def page(title: str, css: str, body: str) -> str:
    """A whole self-contained page around ``body`` (HTML already escaped); ``title`` is escaped here."""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<title>{esc(title)}</title><link rel="icon" href="data:,">'
        f"<style>{css}</style></head>\n<body><main>{body}</main></body></html>\n"
    )


def write_html(report: Report, path: str | Path) -> Path:
    """Write the page atomically (temporary sibling, then rename) and return its path."""
    return write_text_atomically(Path(path), render_html(report))


def _tone(r: Report) -> str:
    if r.outcome == "exception" or r.exit_code != 0:
        return "bad"
    return "ok" if r.outcome == "completed" else "warn"


def _header(r: Report, cmd: str) -> str:
    tone, s = _tone(r), r.steps
    growth = "—" if not _finite(s.growth) else f"×{s.growth:.2f}"
    if s.cpu_growth is not None and _finite(s.cpu_growth) and _finite(s.growth):
        growth += f" (CPU time per step ×{s.cpu_growth:.2f})"
    facts = [
        ("device", f"{r.device.name} ({r.device.kind})"),
        ("wall time", _dur(r.wall_s)),
        ("setup time", _dur(r.setup_s)),
        ("steady-state steps", f"{s.count:,}" + (f" (+{s.warmup} warm-up)" if s.warmup else "")),
        ("median step", _dur(s.median_s) if s.count else "—"),
        ("p90 step", _dur(s.p90_s) if s.count else "—"),
        ("growth last/first quarter", growth if s.count else "—"),
        ("step boundaries from", f"iterations of the loop at {s.loop}" if s.loop else s.source or "—"),
    ]
    # A step that slows down over the run (a leak, a growing pool) deserves a second look.
    ratios = [g for g in (s.growth, s.cpu_growth) if g is not None and _finite(g)]
    hot = {"growth last/first quarter"} if s.count and ratios and max(ratios) > 1.2 else set()
    dl = "".join(
        f'<div><dt>{esc(k)}</dt><dd class="{"growing" if k in hot else ""}">{esc(v)}</dd></div>'
        for k, v in facts
    )
    return (
        f'<header><h1>trainmedic report<span class="badge {tone}">{esc(r.outcome)} · exit {r.exit_code}'
        f'</span></h1><code class="cmd">$ {esc(cmd)}</code><dl class="facts">{dl}</dl></header>'
    )


def _named(category: str) -> str:
    """A category's name in its own colour, darkened where the colour is too light to read."""
    return f'<strong style="color:{_readable(COLORS.get(category, "#1f2933"))}">{esc(category)}</strong>'


def _breakdown(r: Report) -> str:
    total = sum(max(r.breakdown.get(c, 0.0), 0.0) for c in CATEGORIES)
    scale = 1.0 / total if total > 1.0 else 1.0  # fractions summing to 1; tolerate seconds
    shares = {c: max(r.breakdown.get(c, 0.0), 0.0) * scale for c in CATEGORIES}
    w, h = 1000, 44
    parts, x = [], 0.0
    for c in CATEGORIES:
        bw = shares[c] * w
        if bw <= 0:
            continue
        tip = f"{c}: {_pct(shares[c])} of step time"
        parts.append(
            f'<rect class="bar seg-{c}" x="{x:.2f}" y="0" width="{bw:.2f}" height="{h}" '
            f'fill="{COLORS[c]}"><title>{esc(tip)}</title></rect>'
        )
        label = f"{c} {_pct(shares[c])}" if bw >= 8 * (len(c) + 7) else _pct(shares[c]) if bw >= 44 else ""
        if label:
            parts.append(
                f'<text x="{x + bw / 2:.1f}" y="{h / 2 + 5}" text-anchor="middle" '
                f'style="fill:{_ink(COLORS[c])};font-weight:600">{esc(label)}</text>'
            )
        x += bw
    if not parts:
        parts.append(
            f'<rect x="0" y="0" width="{w}" height="{h}" fill="#f1f3f5"/><text x="{w / 2}" '
            f'y="{h / 2 + 5}" text-anchor="middle">no steady-state time was measured</text>'
        )
    svg = (
        f'<svg id="breakdown-chart" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="steady-state time by category">{"".join(parts)}</svg>'
    )
    legend = "".join(
        f'<li class="{"" if shares[c] > 0 else "zero"}" title="{esc(DESCRIPTIONS.get(c, ""))}">'
        f'<span class="sw" style="background:{COLORS[c]}"></span>{esc(c)} <b>{_pct(shares[c])}</b></li>'
        for c in CATEGORIES
    )
    b = r.bottleneck
    if not r.per_step:
        why = (
            "the script ended before its first step"
            if r.evidence == "none"
            else "no step was measured; the shares are of the whole run"
        )
        head = f'<p class="bottleneck">Bottleneck: none named<span class="desc">{esc(why)}</span></p>'
        return (
            f"<section><h2>Where the run's time went</h2>{head}{svg}"
            f'<ul class="legend" id="breakdown-legend">{legend}</ul></section>'
        )
    if r.close_call and b and total > 0:
        pair = " or ".join(
            f"{_named(c)} {_pct(shares.get(c, r.breakdown.get(c, 0.0)))}" for c in r.close_call
        )
        head = (
            f'<p class="bottleneck">Bottleneck: too close to call — {pair} of steady-state step time'
            '<span class="desc">noise could swap the two: see the notes</span></p>'
        )
    elif b and total > 0:
        share = shares.get(b, r.breakdown.get(b, 0.0))
        head = (
            f'<p class="bottleneck">Bottleneck: {_named(b)} — {_pct(share)} of steady-state step time'
            f'<span class="desc">{esc(DESCRIPTIONS.get(b, ""))}</span></p>'
        )
    else:
        head = '<p class="bottleneck">Bottleneck: none measured</p>'
    return (
        f"<section><h2>Where a step's time goes</h2>{head}{svg}"
        f'<ul class="legend" id="breakdown-legend">{legend}</ul></section>'
    )


def _bins(points: list[TimelinePoint]) -> tuple[list[tuple[int, int, float, dict[str, float]]], int]:
    """Average consecutive points into at most MAX_BARS bins: (first, last, seconds, categories)."""
    size = max(1, math.ceil(len(points) / MAX_BARS))
    out = []
    for i in range(0, len(points), size):
        chunk = points[i : i + size]
        n = len(chunk)
        cats = {c: sum(p.categories.get(c, 0.0) for p in chunk) / n for c in CATEGORIES}
        out.append((chunk[0].step, chunk[-1].step, sum(p.seconds for p in chunk) / n, cats))
    return out, size


def _timeline(r: Report) -> str:
    head = "<section><h2>Step timeline</h2>"
    if not r.timeline:
        return (
            head + '<p class="note" id="timeline-empty">No steady-state steps were measured, '
            "so there is no timeline.</p></section>"
        )
    bins, size = _bins(r.timeline)
    w, h, left, right, top, bottom = 1000, 320, 70, 84, 14, 46
    pw, ph = w - left - right, h - top - bottom
    peak = max(max(s, sum(c.values())) for _, _, s, c in bins)
    tick, ymax = nice_axis(peak)
    unit, div = _unit(ymax)
    ys = lambda v: top + ph - v / ymax * ph  # noqa: E731
    out = []
    k = 0.0
    while k <= ymax + tick / 2:
        y = ys(k)
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e7eb"/>'
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{_num(k / div)} {unit}</text>'
        )
        k += tick
    slot = pw / len(bins)
    bw = min(slot * (0.8 if slot >= 4 else 1.0), 48.0)
    used = set()
    for i, (lo, hi, secs, cats) in enumerate(bins):
        x = left + i * slot + (slot - bw) / 2
        base = 0.0
        segs = [(c, cats[c], COLORS[c]) for c in CATEGORIES if cats[c] > 0]
        rest = secs - sum(cats.values())
        if rest > 0.005 * secs:
            segs.append(("unattributed", rest, UNATTRIBUTED))
        rects = []
        for c, v, col in segs:
            y1, y0 = ys(base + v), ys(base)
            base += v
            used.add(c)
            rects.append(
                f'<rect class="bar seg-{c}" x="{x:.2f}" y="{y1:.2f}" width="{bw:.2f}" '
                f'height="{max(y0 - y1, 0.0):.2f}" fill="{col}"/>'
            )
        label = f"step {lo}" if lo == hi else f"steps {lo}–{hi} (mean)"
        tip = f"{label}: {_dur(secs)}" + "".join(f"\n{c}: {_dur(v)}" for c, v, _ in segs)
        out.append(f'<g class="col"><title>{esc(tip)}</title>{"".join(rects)}</g>')
    n_ticks = min(len(bins), 8)
    for t in range(n_ticks):
        i = round(t * (len(bins) - 1) / (n_ticks - 1)) if n_ticks > 1 else 0
        x = left + (i + 0.5) * slot
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 5}" stroke="#9aa5b1"/>'
            f'<text x="{x:.1f}" y="{top + ph + 19}" text-anchor="middle">{bins[i][0]}</text>'
        )
    if r.steps.count and _finite(r.steps.median_s) and 0 < r.steps.median_s <= ymax:
        y = ys(r.steps.median_s)
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#1f2933" '
            f'stroke-dasharray="5 4" stroke-width="1.2"/><text x="{w - right + 6}" y="{y - 3:.1f}" '
            f'style="fill:#1f2933">median<tspan x="{w - right + 6}" dy="14">'
            f"{esc(_dur(r.steps.median_s))}</tspan></text>"
        )
    out.append(
        f'<line x1="{left}" x2="{w - right}" y1="{top + ph}" y2="{top + ph}" stroke="#9aa5b1"/>'
        f'<text x="{left + pw / 2}" y="{h - 6}" text-anchor="middle">step</text>'
        f'<text transform="translate(16 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
        f"seconds per step ({unit})</text>"
    )
    svg = (
        f'<svg id="timeline-chart" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="per-step time by category">{"".join(out)}</svg>'
    )
    keys = [c for c in (*CATEGORIES, "unattributed") if c in used]
    legend = "".join(
        f'<li><span class="sw" style="background:{COLORS.get(c, UNATTRIBUTED)}"></span>{c}</li>' for c in keys
    )
    note = (
        f"{len(r.timeline):,} points; each bar is the mean of {size} consecutive points."
        if size > 1
        else f"{len(r.timeline):,} point{'s' if len(r.timeline) > 1 else ''}, one bar each."
    )
    return (
        f'{head}{svg}<ul class="legend">{legend}</ul>'
        f'<p class="note">{note} Hover a bar for its numbers.</p></section>'
    )


def _gain(f: Finding, speed: str, ceiling: str) -> str:
    """Measured and estimated apart: what the run timed with the fix, and the estimate."""
    estimated = f'<dt>estimated speedup</dt><dd class="speedup">{speed} ({ceiling})</dd>'
    if f.measured is None:
        return estimated
    m = f.measured
    return (
        f'<dt>measured speedup</dt><dd class="speedup measured">×{m.gain:.1f}: {m.fixed_steps} steps with '
        f"{esc(m.change)} ran at {esc(format_seconds(m.fixed_median_s))} against "
        f"{esc(format_seconds(m.as_is_median_s))} (×{m.low:.1f}-×{m.high:.1f} across block pairs)</dd>"
        + estimated
    )


def _findings(findings: list[Finding]) -> str:
    if not findings:
        return (
            '<section><h2>Findings</h2><p class="note">No findings: nothing measured stood out '
            "as a fixable cost.</p></section>"
        )
    cards = []
    for f in findings:
        col = COLORS.get(f.category, "#868e96")
        speed = f"×{f.expected_speedup:.1f}" if _finite(f.expected_speedup) else "—"
        # All of the step in one finding: no ceiling outside it to state (see console.buys).
        ceiling = f"ceiling ×{f.ceiling:.1f}" if _finite(f.ceiling) else "all of the step is this finding"
        kind = f" / {esc(f.kind)}" if f.kind else ""
        where = f"<code>{esc(f.where)}</code>" if f.where else "—"
        call = f'<dt>call</dt><dd><code class="cmd">{esc(f.suggestion)}</code></dd>' if f.suggestion else ""
        cards.append(
            f'<article class="finding" style="border-left-color:{col}"><header>'
            f'<span class="share" style="color:{_readable(col)}">{_pct(f.share)}</span>'
            f"<h3>{esc(f.title)}</h3></header><dl>"
            f'<dt>category</dt><dd><span class="sw" style="background:{col}"></span> {esc(f.category)}{kind}</dd>'
            f"<dt>evidence</dt><dd>{esc(f.evidence)}</dd><dt>where</dt><dd>{where}</dd>"
            f"<dt>fix</dt><dd>{esc(f.fix)}</dd>{call}{_gain(f, speed, ceiling)}</dl></article>"
        )
    return f"<section><h2>Findings</h2>{''.join(cards)}</section>"


def _lines(r: Report) -> str:
    if not r.lines:
        return ""
    top = sorted(r.lines, key=lambda ln: ln.seconds_per_step, reverse=True)[:MAX_LINES]
    rows = "".join(
        f'<tr><td class="mono">{esc(ln.where)}</td><td><span class="sw" style="background:'
        f'{COLORS.get(ln.category, "#868e96")}"></span> {esc(ln.category)}</td><td>{esc(ln.kind)}</td>'
        f'<td class="num">{_num(ln.seconds_per_step * 1000)}</td><td class="num">{_pct(ln.share)}</td></tr>'
        for ln in top
    )
    more = (
        f'<p class="note">Showing the top {len(top)} of {len(r.lines)} lines.</p>'
        if len(r.lines) > len(top)
        else ""
    )
    return (
        f"<section><h2>Costliest lines of your code</h2><table><thead><tr><th>where</th><th>category</th>"
        f'<th>kind</th><th class="num">ms / step</th><th class="num">share</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>{more}</section>"
    )


def _ranks(r: Report) -> str:
    """The torchrun ranks: step times and where each rank's step goes; the straggler marked."""
    if not r.ranks:
        return ""
    straggler = r.straggler.rank if r.straggler else None
    rows = []
    for k in r.ranks:
        mark = ' class="straggler"' if k.rank == straggler else ""
        if k.outcome in ("died", "running"):  # no measurements of its own
            rows.append(
                f'<tr><td class="num">{k.rank}</td><td>{esc(k.host)}</td><td class="bad-text">{esc(k.outcome)}</td>'
                f'<td colspan="8">{esc(k.message)}</td></tr>'
            )
            continue
        cells = "".join(
            f'<td class="num">{_num(x * 1000)}</td>'
            for x in (k.median_s, k.p90_s, k.data_s, k.compute_s, k.wait_s, k.other_s)
        )
        label = esc(k.bottleneck or "—") + (" ◀ straggler" if k.rank == straggler else "")
        rows.append(
            f'<tr{mark}><td class="num">{k.rank}</td><td>{esc(k.host)}</td><td>{esc(k.outcome)}</td>'
            f'<td class="num">{k.steps:,}</td>{cells}<td>{label}</td></tr>'
        )
    verdict = f'<p class="straggler-text">{esc(r.straggler.text)}</p>' if r.straggler else ""
    heads = "".join(
        f'<th class="num">{h}</th>' for h in ("steps", "median", "p90", "data", "compute", "waits", "other")
    )
    return (
        f'<section><h2>Ranks</h2>{verdict}<table class="ranks"><thead><tr><th class="num">rank</th><th>host</th>'
        f"<th>outcome</th>{heads}<th>bottleneck</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        '<p class="note">Milliseconds per steady-state step; "waits" is time in collectives '
        "(DDP all-reduce, torch.distributed calls) waiting for the other ranks.</p></section>"
    )


def _notes(notes: list[str]) -> str:
    if not notes:
        return ""
    return "<section><h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul></section>"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _finite(x: float | None) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%" if _finite(fraction) else "—"


def _num(x: float) -> str:
    """Up to three significant figures without a trailing '.0' on round values."""
    if x == 0:
        return "0"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _dur(s: float) -> str:
    if not _finite(s):
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs" if s > 0 else "0 s"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _unit(ymax: float) -> tuple[str, float]:
    if ymax >= 1:
        return "s", 1.0
    return ("ms", 1e-3) if ymax >= 1e-3 else ("µs", 1e-6)


def nice_axis(peak: float) -> tuple[float, float]:
    """A tick of 1, 2 or 5 x 10^k giving about five gridlines, and the axis top (a tick multiple)."""
    if not _finite(peak) or peak <= 0:
        return 0.25, 1.0
    raw = peak / 5
    mag = 10 ** math.floor(math.log10(raw))
    tick = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return tick, math.ceil(peak / tick - 1e-9) * tick


def _readable(hex_colour: str) -> str:
    """The colour itself, or a darker shade of it when it is too light for text on white."""
    if _ink(hex_colour) == "#ffffff":
        return hex_colour
    r, g, b = (int(int(hex_colour[i : i + 2], 16) * 0.6) for i in (1, 3, 5))
    return f"#{r:02x}{g:02x}{b:02x}"


def _ink(hex_colour: str) -> str:
    """White or near-black text, whichever reads on the given fill."""
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return "#1f2933" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"
