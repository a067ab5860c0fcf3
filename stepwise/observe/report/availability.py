"""The availability chart: per service, instances serving over time on a y-axis of instances,
against the least its rule allows; time at the limit drawn apart from time above it (and a
breach apart from both); its planned windows and, for a lab run, the probe."""

from __future__ import annotations

from stepwise.observe.report.model import Section, Series, _fmt_s
from stepwise.observe.report.svg import (
    AXIS_H,
    WIDTH,
    WINDOW_FILL,
    Frame,
    axis_svg,
    cut,
    esc,
    frame_for,
    span,
    zoom_attrs,
)

ROW_H, GAP = 46, 10
SERVING = "#2f6db5"
AT_LIMIT = "#e07b00"
BELOW = "#8b0000"
LIMIT = "#c33"
PROBED = "#9c9"
PROBE_FAILED = "#d33"
#: (colour, how the line is drawn, what it means): the chart's legend, every line in it
LINES: tuple[tuple[str, str, str], ...] = (
    (SERVING, "solid", "instances serving, above the limit"),
    (AT_LIMIT, "thick", "serving exactly at the limit"),
    (BELOW, "thick", "below the limit"),
    (LIMIT, "dashed", "the least the rule allows"),
    (WINDOW_FILL, "block", "planned downtime window"),
)
PROBE_LINES: tuple[tuple[str, str, str], ...] = (
    (PROBED, "block", "probed span (requests answered)"),
    (PROBE_FAILED, "block", "failed probe requests per second"),
)


def _yv(s: Series, y: float, v: float) -> float:
    return y + ROW_H - 2 - (ROW_H - 8) * v / max(s.total, 1)


def _label(s: Series, f: Frame, y: float) -> list[str]:
    """The service and its rule in the label column, its y-axis (0, the limit, all) at its
    right edge."""
    room = f.label_w - 34
    name = f"{s.service} ({s.total})" if s.total else s.service
    out = [
        f'<text class="lane" x="4" y="{y + 16}">{esc(cut(name, room))}'
        f"<title>{esc(s.service)}: {s.total} instances</title></text>",
        f'<text class="lane rule" x="4" y="{y + 32}" fill="#666">{esc(cut(s.rule, room))}'
        f"<title>{esc(s.rule)}</title></text>",
        f'<rect x="{f.label_w}" y="{y}" width="{f.chart_w}" height="{ROW_H}" '
        'fill="#fbfbfb" stroke="#ddd"/>',
    ]
    if not s.total:
        return out
    ticks = [(s.total, f"{s.total}"), (0, "0")]
    if s.min_serving is not None and s.min_serving not in (0, s.total):
        ym = _yv(s, y, s.min_serving)
        if min(abs(ym - _yv(s, y, 0)), abs(ym - _yv(s, y, s.total))) >= 12:
            ticks.append((s.min_serving, f"{s.min_serving}"))
    for v, text in ticks:
        yy = _yv(s, y, v)
        out.append(
            f'<line x1="{f.label_w - 3}" y1="{yy:.1f}" x2="{f.label_w}" y2="{yy:.1f}" '
            'stroke="#888"/>'
            f'<text class="tick y" x="{f.label_w - 5}" y="{yy + 4:.1f}" text-anchor="end">'
            f"{esc(text)}</text>"
        )
    return out


def _windows(s: Series, f: Frame, y: float) -> list[str]:
    return [
        f'<rect {span(a, b)} x="{f.x(a):.1f}" y="{y}" width="{max(f.x(b) - f.x(a), 1.5):.1f}" '
        f'height="{ROW_H}" fill="{WINDOW_FILL}" opacity="0.6"><title>'
        f"{esc(f'planned downtime window {_fmt_s(a)} to {_fmt_s(b)}: {why}')}</title></rect>"
        for a, b, why in s.windows
    ]


def _serving(s: Series, f: Frame, y: float) -> list[str]:
    """The step line of instances serving; its spans at the limit and below it drawn over it
    in their own colours; the dashed line of the least the rule allows."""
    d: list[str] = []
    at: list[str] = []
    below: list[str] = []
    # the same lines in seconds (start, end, y), which the page's zoom redraws them from
    steps: list[str] = []
    spans: dict[bool, list[str]] = {True: [], False: []}
    pts = s.points
    for i, (t, v) in enumerate(pts):
        x, yy = f.x(t), _yv(s, y, v)
        d.append(f"M{x:.1f},{yy:.1f}" if i == 0 else f"H{x:.1f}V{yy:.1f}")
        t_end = pts[i + 1][0] if i + 1 < len(pts) else f.axis_s
        steps.append(f"{t:.2f},{t_end:.2f},{yy:.1f}")
        end = f.x(pts[i + 1][0]) if i + 1 < len(pts) else f.right
        if s.min_serving is not None and v <= s.min_serving:
            (at if v == s.min_serving else below).append(f"M{x:.1f},{yy:.1f}H{max(end, x + 1):.1f}")
            spans[v == s.min_serving].append(f"{t:.2f},{t_end:.2f},{yy:.1f}")
    d.append(f"H{f.right:.1f}")
    low = min(v for _, v in pts)
    out = [
        f'<path class="serving" data-steps="{";".join(steps)}" d="{"".join(d)}" '
        f'fill="none" stroke="{SERVING}" '
        f'stroke-width="1.5"><title>{esc(f"{s.service}: lowest {low} of {s.total} serving")}'
        "</title></path>"
    ]
    if s.min_serving is not None:
        ym = _yv(s, y, s.min_serving)
        out.append(
            f'<line x1="{f.label_w}" y1="{ym:.1f}" x2="{f.right:.1f}" y2="{ym:.1f}" '
            f'stroke="{LIMIT}" stroke-dasharray="4,3">'
            f"<title>{esc(f'rule {s.rule}: at least {s.min_serving} serving')}</title></line>"
        )
    for cls, colour, segs, ts, what in (
        ("at-limit", AT_LIMIT, at, spans[True], "exactly at the limit"),
        ("below-limit", BELOW, below, spans[False], "below the limit"),
    ):
        if segs:
            out.append(
                f'<path class="{cls}" data-segs="{";".join(ts)}" d="{"".join(segs)}" '
                f'fill="none" stroke="{colour}" '
                f'stroke-width="4" opacity="0.85"><title>{esc(f"{s.service}: {what}")}'
                "</title></path>"
            )
    return out


def _probe(s: Series, f: Frame, y: float) -> list[str]:
    """The strip of the probed span and a red bar per second with failed requests."""
    a, b = s.probe[0][0], s.probe[-1][0] + 1
    out = [
        f'<rect {span(a, b)} x="{f.x(a):.1f}" y="{y + ROW_H - 3}" '
        f'width="{max(f.x(b) - f.x(a), 1):.1f}" '
        f'height="3" fill="{PROBED}"><title>probed</title></rect>'
    ]
    for t, req, failed, ms in s.probe:
        if failed:
            fh = max(3.0, (ROW_H - 4) * failed / max(req, 1))
            tip = (
                f"{s.service}: {failed} of {req} probe requests failed at {_fmt_s(t)} "
                f"(max {ms:.0f} ms)"
            )
            out.append(
                f'<rect class="probe-failed" {span(t, t + 1)} x="{f.x(t):.1f}" '
                f'y="{y + ROW_H - fh:.1f}" '
                f'width="{max(f.x(t + 1) - f.x(t), 1.5):.1f}" height="{fh:.1f}" '
                f'fill="{PROBE_FAILED}"><title>{esc(tip)}</title></rect>'
            )
    return out


def availability_svg(sec: Section) -> str:
    """One row per service that stops (and per probed target), on the section's clock."""
    names = [f"{s.service} ({s.total})" for s in sec.series] + [s.rule for s in sec.series]
    f = frame_for(sec.axis_s, names, sec.t0)
    f = Frame(f.axis_s, f.label_w + 26, f.t0)  # room for the y-axis numbers
    height = AXIS_H + (ROW_H + GAP) * max(len(sec.series), 1)
    parts = [
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="availability" {zoom_attrs(f, height, 0.0)}>'
    ]
    parts += ['<g class="axis">', *axis_svg(f, height), "</g>"]
    for i, s in enumerate(sec.series):
        y = AXIS_H + i * (ROW_H + GAP)
        parts.append(f'<g data-f="{esc(s.service)}">')
        parts += _label(s, f, y) + _windows(s, f, y)
        if s.total:
            parts += _serving(s, f, y)
        if s.probe:
            parts += _probe(s, f, y)
        parts.append("</g>")
    if not sec.series:
        parts.append(f'<text x="{f.label_w}" y="{AXIS_H + 16}">no service stops here</text>')
    parts.append("</svg>")
    return "".join(parts)
