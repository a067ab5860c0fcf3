"""Render the report's view model as one self-contained HTML file with inline SVG.

Why inline SVG built here rather than a charting library: the file must open anywhere with no
network (an operator's laptop in a maintenance window), stay small for a 1,000-node plan, and
carry no third-party script to review; a Gantt chart and step functions are a few rectangles
and paths. Hover text is SVG <title> (no script needed). Every string from data goes through
`esc` (html.escape): a node, service or task message never becomes markup or script. The only
script is the inline self-check below, which tests read; a strict Content-Security-Policy
forbids loading anything from anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Callable, Iterable, Sequence

from stepwise.model.vocab import UnitState
from stepwise.observe.report.model import Bar, Report, Section, Series, _fmt_s

WIDTH = 1360
LABEL_W = 190
CHART_W = WIDTH - LABEL_W - 16
AXIS_H = 34
COLOURS: dict[str, str] = {
    "planned": "#9db4d6",
    UnitState.DONE: "#3a9d5d",
    "late": "#e0a030",
    "resumed": "#7b5fc7",
    UnitState.SKIPPED: "#c8c8c8",
    UnitState.PENDING: "#e4e4e4",
    UnitState.RUNNING: "#4aa3df",
    UnitState.INTERRUPTED: "#c77d7d",
    UnitState.FAILED: "#d33",
}

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;\
margin:0;color:#222;background:#fafafa}
header{background:#243447;color:#fff;padding:12px 24px}header h1{margin:0;font-size:20px}
header p{margin:2px 0 0;color:#cfd8e3;font-size:12px}
main{padding:8px 24px 40px;max-width:1400px}
section.sec{background:#fff;border:1px solid #ddd;border-radius:6px;\
padding:8px 16px 16px;margin:16px 0}
h2{font-size:18px;margin:8px 0}h3{font-size:15px;margin:14px 0 4px}
table{border-collapse:collapse;font-size:12px}\
td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}
.summary table td:first-child{font-weight:600;white-space:nowrap}
.chart svg{width:100%;height:auto;display:block}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;\
vertical-align:middle;border-radius:2px}
.muted{color:#777;font-size:12px}\
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;word-break:break-all}
.why{max-width:640px}details summary{cursor:pointer;margin:8px 0}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .lane{font-size:11px}
"""

#: after the page rendered: the size of each part and any error, as an attribute tests read
#: (headless Chromium --dump-dom); it also counts Content-Security-Policy violations, i.e.
#: anything that tried to load from outside the file
SELF_CHECK = """
(function(){var errors=0,blocked=0;
window.addEventListener('error',function(){errors++});
document.addEventListener('securitypolicyviolation',function(){blocked++});
function size(sel){var e=document.querySelector(sel);if(!e)return [0,0];\
var r=e.getBoundingClientRect();
return [Math.round(r.width),Math.round(r.height)]}
window.addEventListener('load',function(){var c={timeline:size('#timeline svg'),\
availability:size('#availability svg'),
summary:size('#summary'),bars:document.querySelectorAll('rect.bar').length,\
errors:errors,blocked:blocked};
document.documentElement.setAttribute('data-selfcheck',JSON.stringify(c));});})();
"""


#: the script allowed by its hash, not any inline script: a string from data that somehow
#: became a <script> would not run; base-uri and form-action are not covered by default-src
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'sha256-"
    f"{base64.b64encode(hashlib.sha256(SELF_CHECK.encode()).digest()).decode()}'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
#: how every report begins: `write_output` replaces an existing file only if it starts so
HEAD = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="generator" content="stepwise">'
)


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _x(t: float, axis: float) -> float:
    return LABEL_W + CHART_W * max(0.0, min(t, axis)) / axis


def _ticks(axis: float) -> list[float]:
    """Round tick steps (1, 2, 5 x 10^n seconds, or minutes/hours) giving ~8-12 ticks."""
    steps = [
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
        3600,
        7200,
        10800,
        21600,
        43200,
        86400,
    ]
    step = next((s for s in steps if axis / s <= 12), steps[-1] * math.ceil(axis / 12 / steps[-1]))
    return [i * step for i in range(int(axis // step) + 1)]


def _axis(axis: float, height: int) -> list[str]:
    out = []
    for t in _ticks(axis):
        x = _x(t, axis)
        out.append(
            f'<line x1="{x:.1f}" y1="{AXIS_H - 6}" x2="{x:.1f}" y2="{height}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="{AXIS_H - 10}" text-anchor="middle">{esc(_fmt_s(t))}</text>'
        )
    return out


def _boundaries(sec: Section, height: int) -> list[str]:
    out, last_x = [], -1e9
    for t, label, starts_part in sec.boundaries:
        x = _x(t, sec.axis_s)
        out.append(
            f'<line x1="{x:.1f}" y1="{AXIS_H - 4}" x2="{x:.1f}" y2="{height}" stroke="#8a6" '
            f'stroke-dasharray="3,3"><title>{esc(label)} at {esc(_fmt_s(t))}</title></line>'
        )
        if starts_part and x - last_x > 90:
            right = x > LABEL_W + CHART_W - 110  # near the right edge: the label ends at its line
            anchor = ' text-anchor="end"' if right else ""
            out.append(
                f'<text x="{x + (-2 if right else 2):.1f}" y="10" fill="#585"{anchor}>'
                f"{esc(label)}</text>"
            )
            last_x = x
    return out


def _bar(b: Bar, axis: float, y: float, h: float) -> str:
    x1, x2 = _x(b.start, axis), _x(b.end, axis)
    tip = f"{b.label}\n{b.kind}: {_fmt_s(b.start)} to {_fmt_s(b.end)}" + (
        f"\nwhy: {b.detail}" if b.detail else ""
    )
    return (
        f'<rect class="bar {esc(b.kind)}" x="{x1:.1f}" y="{y:.1f}" width="{max(x2 - x1, 1.5):.1f}" '
        f'height="{h}" rx="2" fill="{COLOURS.get(b.kind, "#999")}"><title>{esc(tip)}</title></rect>'
    )


def timeline_svg(sec: Section) -> str:
    """Gantt chart: a lane per node (or role), planned bars and, for a run, actual bars below
    them; a top lane of the plan's downtime windows; dashed lines at stage and level boundaries."""
    row = 22
    win_services = list(dict.fromkeys(w[0] for w in sec.windows))
    top = AXIS_H + row * len(win_services)
    height = top + row * len(sec.lanes) + 6
    index = {lane: i for i, (lane, _) in enumerate(sec.lanes)}
    parts = [f'<svg viewBox="0 0 {WIDTH} {height}" role="img" aria-label="timeline">']
    parts += _axis(sec.axis_s, height)
    for i, svc in enumerate(win_services):
        y = AXIS_H + i * row
        parts.append(f'<text class="lane" x="4" y="{y + 15}">window: {esc(svc)}</text>')
        for s, a, b, why in sec.windows:
            if s == svc:
                x1, x2 = _x(a, sec.axis_s), _x(b, sec.axis_s)
                parts.append(
                    f'<rect class="window" x="{x1:.1f}" y="{y + 3}" '
                    f'width="{max(x2 - x1, 1.5):.1f}" height="{row - 6}" fill="#f6c7a8"><title>'
                    f"{esc(f'{svc} down {_fmt_s(a)} to {_fmt_s(b)}: {why}')}"
                    f"</title></rect>"
                )
    group = None
    for i, (lane, g) in enumerate(sec.lanes):
        y = top + i * row
        if i % 2 == 0:
            parts.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{row}" fill="#f7f9fc"/>')
        name = lane if lane == g or not g or g == group else f"{lane}  ({g})"
        group = g
        parts.append(
            f'<text class="lane" x="4" y="{y + 15}">{esc(name[:34])}'
            f"<title>{esc(lane)}</title></text>"
        )
    two = sec.kind == "run"
    for b in sec.planned:
        if b.lane in index:
            parts.append(_bar(b, sec.axis_s, top + index[b.lane] * row + 3, 7 if two else 16))
    for b in sec.actual:
        if b.lane in index:
            parts.append(_bar(b, sec.axis_s, top + index[b.lane] * row + 11, 9))
    parts += _boundaries(sec, height)
    parts.append("</svg>")
    return "".join(parts)


def _series_label(s: Series, axis: float, y: int, h: int) -> list[str]:
    name = s.service[:24] + (f" ({s.total})" if s.total else "")
    return [
        f'<text class="lane" x="4" y="{y + 14}">{esc(name)}'
        f"<title>{esc(s.service)}: {s.total} instances</title></text>",
        f'<text class="lane" x="4" y="{y + 28}" fill="#777">{esc(s.rule[:34])}'
        f"<title>{esc(s.rule)}</title></text>",
        f'<rect x="{LABEL_W}" y="{y}" width="{CHART_W}" height="{h}" '
        'fill="#fbfbfb" stroke="#eee"/>',
    ]


def _series_windows(s: Series, axis: float, y: int, h: int) -> list[str]:
    out = []
    for a, b, why in s.windows:
        x1, x2 = _x(a, axis), _x(b, axis)
        out.append(
            f'<rect x="{x1:.1f}" y="{y}" width="{max(x2 - x1, 1.5):.1f}" height="{h}" '
            'fill="#f6c7a8" opacity="0.6"><title>'
            f"{esc(f'planned downtime window {_fmt_s(a)} to {_fmt_s(b)}: {why}')}"
            "</title></rect>"
        )
    return out


def _series_serving(s: Series, axis: float, y: int, h: int) -> list[str]:
    """The step line of instances serving and the dashed line of the least its rule allows."""

    def yv(v: float) -> float:
        return y + h - 2 - (h - 6) * v / s.total

    d, prev = [], None
    for t, v in s.points:
        x = _x(t, axis)
        d.append(f"M{x:.1f},{yv(v):.1f}" if prev is None else f"H{x:.1f}V{yv(v):.1f}")
        prev = v
    d.append(f"H{LABEL_W + CHART_W}")
    low = min(v for _, v in s.points)
    out = [
        f'<path class="serving" d="{"".join(d)}" fill="none" '
        'stroke="#2f6db5" stroke-width="1.5">'
        f"<title>{esc(f'{s.service}: instances serving, lowest {low} of {s.total}')}"
        "</title></path>"
    ]
    if s.min_serving is not None:
        ym = yv(s.min_serving)
        out.append(
            f'<line x1="{LABEL_W}" y1="{ym:.1f}" x2="{LABEL_W + CHART_W}" y2="{ym:.1f}" '
            'stroke="#c33" stroke-dasharray="4,3">'
            f"<title>{esc(f'rule {s.rule}: at least {s.min_serving} serving')}"
            f"</title></line>"
        )
    return out


def _series_probe(s: Series, axis: float, y: int, h: int) -> list[str]:
    """The strip of the probed span and a red bar per second with failed requests."""
    a, b = s.probe[0][0], s.probe[-1][0] + 1
    out = [
        f'<rect x="{_x(a, axis):.1f}" y="{y + h - 3}" '
        f'width="{max(_x(b, axis) - _x(a, axis), 1):.1f}" '
        f'height="3" fill="#9c9"><title>probed</title></rect>'
    ]
    for t, req, failed, ms in s.probe:
        if failed:
            x1, x2 = _x(t, axis), _x(t + 1, axis)
            fh = max(3.0, (h - 4) * failed / max(req, 1))
            tip = (
                f"{s.service}: {failed} of {req} probe requests failed at {_fmt_s(t)} "
                f"(max {ms:.0f} ms)"
            )
            out.append(
                f'<rect class="probe-failed" x="{x1:.1f}" y="{y + h - fh:.1f}" '
                f'width="{max(x2 - x1, 1.5):.1f}" height="{fh:.1f}" fill="#d33">'
                f"<title>{esc(tip)}</title></rect>"
            )
    return out


def _series_row(s: Series, axis: float, y: int, h: int) -> list[str]:
    out = _series_label(s, axis, y, h) + _series_windows(s, axis, y, h)
    if s.total:
        out += _series_serving(s, axis, y, h)
    if s.probe:
        out += _series_probe(s, axis, y, h)
    return out


def availability_svg(sec: Section) -> str:
    """Per service: instances serving over time (blue) against the least its rule allows (red
    dashes), its planned windows (orange) and, for a lab run, the probe's failures (red)."""
    h, gap = 34, 8
    height = AXIS_H + (h + gap) * max(len(sec.series), 1)
    parts = [f'<svg viewBox="0 0 {WIDTH} {height}" role="img" aria-label="availability">']
    parts += _axis(sec.axis_s, height)
    for i, s in enumerate(sec.series):
        parts += _series_row(s, sec.axis_s, AXIS_H + i * (h + gap), h)
    if not sec.series:
        parts.append(f'<text x="{LABEL_W}" y="{AXIS_H + 16}">no service stops in this plan</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=why' if h == 'why' else ''}>{esc(c)}</td>"
            for h, c in zip(head, r, strict=True)
        )
        + "</tr>"
        for r in rows
    )
    header = "" if not any(head) else "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
    return f'<table class="{esc(cls)}">{header}{body}</table>'


def _legend(sec: Section) -> str:
    kinds = ["planned"] + (
        [
            UnitState.DONE,
            "late",
            "resumed",
            UnitState.SKIPPED,
            UnitState.FAILED,
            UnitState.INTERRUPTED,
            UnitState.RUNNING,
            UnitState.PENDING,
        ]
        if sec.kind == "run"
        else []
    )
    items = "".join(f'<span><i style="background:{COLOURS[k]}"></i>{esc(k)}</span>' for k in kinds)
    items += '<span><i style="background:#f6c7a8"></i>planned downtime window</span>'
    note = ""
    if sec.kind == "run" and abs(sec.plan_scale - 1.0) > 1e-9:
        note = (
            f'<p class="muted">Planned bars are scaled x{sec.plan_scale:.3g} to this run\'s clock: '
            "the estimate is for real hardware, so they show the plan's shape, "
            "not its duration.</p>"
        )
    return f'<div class="legend">{items}</div>{note}'


def _summary_html(sec: Section, sid: Callable[[str], str]) -> str:
    out = [
        f'<div class="summary"{sid("summary")}>' + _table(("", ""), sec.summary, "kv"),
    ]
    if sec.continue_command:
        out.append(f"<p>To continue: <code>{esc(sec.continue_command)}</code></p>")
    out.append("</div>")
    return "".join(out)


def _failures_html(sec: Section) -> str:
    return "<h3>Failures</h3>" + _table(
        ("host", "unit", "task", "status", "message"),
        ([f[k] for k in ("host", "unit", "task", "status", "message")] for f in sec.failures),
    )


def _timeline_html(sec: Section, sid: Callable[[str], str]) -> str:
    lanes = "node" if any(g and lane != g for lane, g in sec.lanes) else "role (batches aggregated)"
    return (
        f'<h3>Timeline</h3><p class="muted">One lane per {lanes}; '
        "hover a bar for its units and why.</p>"
        + _legend(sec)
        + f'<div class="chart timeline"{sid("timeline")}>{timeline_svg(sec)}</div>'
    )


def _availability_html(sec: Section, sid: Callable[[str], str]) -> str:
    return (
        '<h3>Availability</h3><p class="muted">Instances serving (blue) '
        "vs the least the rule allows (red dashes); planned windows (orange)"
        + (
            "; for a lab run, the probe: requests answered (green strip), "
            "failed requests per second (red)"
            if sec.kind == "run"
            else ""
        )
        + f'.</p><div class="chart availability"{sid("availability")}>{availability_svg(sec)}</div>'
    )


def _probe_html(sec: Section) -> str:
    return "<h3>Probe</h3>" + _table(
        ("target", "requests", "failed", "max latency ms"),
        (
            [p["target"], str(p["requests"]), str(p["failed"]), str(p["max_ms"])]
            for p in sec.probe_targets
        ),
    )


def _batches_html(sec: Section) -> str:
    return (
        f"<details{' open' if sec.kind == 'plan' else ''}><summary>Batches and why "
        f"({len(sec.batches)})</summary>"
        + _table(
            ("batch", "roles", "nodes", "steps", "start", "end", "why"),
            (
                [b[k] for k in ("batch", "roles", "nodes", "steps", "start", "end", "why")]
                for b in sec.batches
            ),
        )
        + "</details>"
    )


def section_html(sec: Section, first: bool) -> str:
    """One section (a plan or a run): summary, failures, timeline, availability, probe, batches.
    Only the first section carries the ids the page's self-check looks for."""
    sid = lambda name: f' id="{name}"' if first else ""
    out = [f'<section class="sec"><h2>{esc(sec.title)}</h2>', _summary_html(sec, sid)]
    if sec.failures:
        out.append(_failures_html(sec))
    out.append(_timeline_html(sec, sid))
    out.append(_availability_html(sec, sid))
    if sec.probe_targets:
        out.append(_probe_html(sec))
    if sec.batches:
        out.append(_batches_html(sec))
    out.append("</section>")
    return "".join(out)


def render(report: Report) -> str:
    """The whole report as one HTML document (no external resource of any kind)."""
    body = "".join(section_html(s, i == 0) for i, s in enumerate(report.sections))
    return (
        HEAD + f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(report.title)}</title><script>{SELF_CHECK}</script>"
        f"<style>{STYLE}</style></head><body>"
        f"<header><h1>{esc(report.title)}</h1>"
        f"<p>stepwise report, generated {esc(report.generated_at)}</p></header>"
        f"<main>{body}</main></body></html>\n"
    )
