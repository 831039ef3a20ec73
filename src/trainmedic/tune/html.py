"""Render a TuneResult as one self-contained HTML page.

The same rules as the run report's page (``report.html``), whose stylesheet it extends: CSS
inline, charts as inline SVG (tune_charts), hover text as SVG ``<title>``, no script, fonts or
fetches, and every string from the result HTML-escaped.
"""

from __future__ import annotations

from pathlib import Path

from trainmedic._os import write_text_atomically
from trainmedic.run.report.html import BASE_CSS, esc, page
from trainmedic.tune.charts import color, roofline_chart, throughput_chart
from trainmedic.tune.console import (
    ceilings_text,
    format_span,
    format_times,
    gain_text,
    marks,
    ordered_rows,
    search_text,
    stopped_text,
    vs_baseline,
)
from trainmedic.tune.model import SCHEMA, TuneResult
from trainmedic.units import format_sig3 as sig3

__all__ = ["render_tune_html", "write_tune_html"]

TUNE_CSS = (
    BASE_CSS
    + """
.verdict{font-size:18px;font-weight:700;margin:0 0 10px}
.gain{font-weight:700;color:#1f6a2a;margin:10px 0 0}
.why{margin:0 0 10px;padding-left:20px}
.stopped{background:#fff3c4;color:#8d6708;border-radius:6px;padding:6px 12px;margin:10px 0 0}
dl.facts .wide{grid-column:1/-1}
.legend svg.key{display:inline-block;width:30px;height:12px}
.sym{display:inline-block;width:12px;text-align:center;font-weight:700;color:#52606d}
.sym.hollow{height:12px;border:2px solid #52606d;border-radius:50%}
tr.best td{background:#e3f9e5;font-weight:600}tr.tie td{background:#f4fce3}
.mark{font-weight:600;white-space:nowrap}
.status{font-weight:600;margin-right:8px}.status-skipped{color:#8d6708}.status-failed{color:#a61e1e}
.status-not_run{color:var(--muted)}
.bound-compute{color:#2f9e44}.bound-bandwidth{color:#1c7ed6}
#warnings{border-left:6px solid #f0b429}ul.warnings li{color:#8d6708}
"""
)


def render_tune_html(result: TuneResult) -> str:
    """The whole tuning run as one HTML document (a string; nothing is written)."""
    body = "".join(
        [
            _header(result),
            _verdict(result),
            f"<section><h2>Throughput against batch size</h2>{throughput_chart(result)}</section>",
            f"<section><h2>Roofline</h2>{roofline_chart(result)}</section>",
            _table(result),
            _notes(result),
            f"<footer>trainmedic tune · schema {esc(SCHEMA)}</footer>",
        ]
    )
    return page(f"trainmedic tune: {result.target}", TUNE_CSS, body)


def write_tune_html(result: TuneResult, path: str | Path) -> Path:
    """Write the page atomically (temporary sibling, then rename) and return its path."""
    return write_text_atomically(Path(path), render_tune_html(result))


def _badge(result: TuneResult) -> tuple[str, str]:
    """The tone and words of the header badge: what a glance at the page should take away."""
    if not result.measured:
        return "bad", "nothing measured"
    gain = result.gain
    if gain and result.best != result.baseline and result.baseline not in result.ties:
        text = f"{format_times(gain)} faster"
    else:
        text = (
            "baseline is best" if result.best is not None and result.best == result.baseline else "best found"
        )
    if result.stopped_early:
        return "warn", f"{text} · stopped early"
    return "ok", text


def _header(r: TuneResult) -> str:
    tone, badge = _badge(r)
    baseline = "—"
    if r.baseline is not None:
        baseline = r.baseline.label + (f" ({r.baseline_source})" if r.baseline_source else "")
    time = format_span(r.elapsed_s) + (f" of {format_span(r.budget_s)}" if r.budget_s is not None else "")
    facts = [
        ("device", r.device, ""),
        ("search", search_text(r).split(": ", 1)[-1], ""),
        ("time", time, ""),
        ("baseline", baseline, ""),
        ("ceilings", ceilings_text(r.ceilings), "wide"),
    ]
    dl = "".join(f'<div class="{cls}"><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>' for k, v, cls in facts)
    return (
        f'<header><h1>trainmedic tune<span class="badge {tone}">{esc(badge)}</span></h1>'
        f'<code class="cmd">{esc(r.target)}</code><dl class="facts">{dl}</dl></header>'
    )


def _verdict(r: TuneResult) -> str:
    verdict = r.verdict or ("No verdict: nothing was measured." if not r.measured else "")
    parts = [f'<p class="verdict">{esc(verdict)}</p>'] if verdict else []
    if r.why:
        parts.append('<ul class="why">' + "".join(f"<li>{esc(w)}</li>" for w in r.why) + "</ul>")
    if r.change:
        parts.append(f'<h3>The change</h3><code class="cmd">{esc(r.change)}</code>')
    gain = gain_text(r)
    if gain:
        parts.append(f'<p class="{"gain" if r.gain and "faster" in gain else "note"}">{esc(gain)}</p>')
    stopped = stopped_text(r)
    if stopped:
        parts.append(f'<p class="stopped">{esc(stopped)}</p>')
    return f'<section id="verdict"><h2>Verdict</h2>{"".join(parts)}</section>'


def _table(r: TuneResult) -> str:
    heads = ["config", r.unit, "±", "vs baseline", "first step", "FLOP/B", "bound", "% of roof", ""]
    head = "".join(
        f'<th class="{"" if i in (0, 6, 8) else "num"}">{esc(h)}</th>' for i, h in enumerate(heads)
    )
    body = []
    for row in ordered_rows(r):
        sw = f'<span class="sw" style="background:{color(row.config.precision)}"></span> '
        label = f"<td>{sw}{esc(row.config.label)}</td>"
        if row.status != "measured" or row.measurement is None:
            body.append(
                f'<tr class="{esc(row.status)}">{label}<td colspan="{len(heads) - 1}">'
                f'<span class="status status-{esc(row.status)}">{esc(row.status.replace("_", " "))}</span>'
                f"{esc(row.reason or 'no reason recorded')}</td></tr>"
            )
            continue
        m, roof, tags = row.measurement, row.roofline, marks(r, row.config)
        cells = [
            sig3(m.samples_per_s),
            f"±{m.spread:.1%}",
            format_times(vs_baseline(r, row)),
            format_span(m.first_step_s),
        ]
        nums = "".join(f'<td class="num">{esc(c)}</td>' for c in cells)
        if roof is None:
            nums += '<td class="num">—</td><td>—</td><td class="num">—</td>'
        else:
            nums += (
                f'<td class="num">{esc(sig3(roof.intensity))}</td><td class="bound-{esc(roof.bound)}">'
                f'{esc(roof.bound)}</td><td class="num">{roof.share_of_ceiling:.0%}</td>'
            )
        cls = "best" if "best" in tags else "tie" if "tie" in tags else ""
        body.append(f'<tr class="{cls}">{label}{nums}<td class="mark">{esc(" · ".join(tags))}</td></tr>')
    return (
        f'<section><h2>Every configuration</h2><table id="tune-table"><thead><tr>{head}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table><p class="note">± is the spread of the timed trials around '
        "their median (the measurement's noise); first step is the untimed first step (compile, autotuning); "
        "% of roof is the achieved FLOP/s over the roof above the configuration's intensity.</p></section>"
    )


def _notes(r: TuneResult) -> str:
    out = ""
    if r.warnings:
        out += (
            '<section class="warn-edge" id="warnings"><h2>Warnings</h2><ul class="warnings">'
            + "".join(f"<li>{esc(w)}</li>" for w in r.warnings)
            + "</ul></section>"
        )
    if r.notes:
        out += (
            "<section><h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in r.notes) + "</ul></section>"
        )
    return out
