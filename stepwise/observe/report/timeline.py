"""The timeline: a Gantt chart of a plan (bars coloured by the kind of their work, the
critical path outlined) or of a run (each batch planned above, as it ran below, on one
clock), one lane for every downtime window, and labelled stage and level markers.

No two text labels overlap: markers go in rows above the axis and are left out (their text
stays on hover) where every row is taken; text goes on a bar only when the bar is wide enough
and no other text of its lane is there."""

from __future__ import annotations

from stepwise.model.vocab import UnitState
from stepwise.observe.report.model import Bar, Section, _fmt_s
from stepwise.observe.report.svg import (
    AXIS_H,
    COLOURS,
    CRITICAL_STROKE,
    MEANING,
    WIDTH,
    WINDOW_FILL,
    Frame,
    Rows,
    axis_svg,
    clock,
    cut,
    esc,
    frame_for,
    span,
    text_w,
    zoom_attrs,
)

MARK_ROW = 15
MARK_ROWS = 3
#: actual bars with dark fills carry white text
_LIGHT_TEXT = frozenset({UnitState.DONE, UnitState.FAILED, "resumed", UnitState.INTERRUPTED})


def _lane_names(sec: Section) -> list[str]:
    """Each lane's name as drawn: a node's role is said on the first node of the role."""
    out, group = [], None
    for lane, g in sec.lanes:
        out.append(lane if lane == g or not g or g == group else f"{lane}  ({g})")
        group = g
    return out


def frame_of(sec: Section) -> Frame:
    names = _lane_names(sec) + ["downtime windows"]
    return frame_for(sec.axis_s, names, sec.t0)


def _when(f: Frame, t: float) -> str:
    return _fmt_s(t) + (f" ({clock(f.t0, t)} UTC)" if f.t0 is not None else "")


def _markers(sec: Section, f: Frame, height: float) -> list[str]:
    """A dashed line where each part (stage, or the OS upgrade's seed steps) begins, a dotted
    one at each level gate; their labels in rows at the top, parts first."""
    rows = Rows(MARK_ROWS)
    lines, texts = [], []
    ordered = sorted(sec.boundaries, key=lambda b: (not b[2], b[0]))
    for t, label, starts_part in ordered:
        x = f.x(t)
        short = label if starts_part else label.split(":", 1)[0][:40]
        dash = "5,3" if starts_part else "1,3"
        lines.append(
            f'<line data-t="{t:.2f}" x1="{x:.1f}" y1="{MARK_ROW * MARK_ROWS}" x2="{x:.1f}" '
            f'y2="{height}" '
            f'stroke="{"#6a8f3a" if starts_part else "#9aa"}" stroke-dasharray="{dash}">'
            f"<title>{esc(label)} at {esc(_when(f, t))}</title></line>"
        )
        w = text_w(short)
        right_edge = x + w > f.right
        left = x - w if right_edge else x
        row = rows.place(left, left + w)
        if row is None:
            continue
        anchor = ' text-anchor="end"' if right_edge else ""
        cls = "mark part" if starts_part else "mark level"
        texts.append(
            f'<text class="{cls}" data-t="{t:.2f}" x="{x + (-2 if right_edge else 2):.1f}" '
            f'y="{row * MARK_ROW + 11}"{anchor}>{esc(short)}<title>{esc(label)}</title></text>'
        )
    return lines + texts


def _tip(b: Bar, f: Frame, planned: bool) -> str:
    what = MEANING.get(b.kind, b.kind) if planned else b.kind
    nodes = ", ".join(b.nodes[:40]) + (f" (+{len(b.nodes) - 40} more)" if len(b.nodes) > 40 else "")
    return "\n".join(
        x
        for x in (
            b.label,
            f"{'planned' if planned else 'ran'}: {_when(f, b.start)} to {_when(f, b.end)} ({what})",
            "on the critical path" if b.critical else "",
            f"nodes: {nodes}" if nodes else "",
            f"why: {b.detail}" if b.detail else "",
        )
        if x
    )


def _bar(b: Bar, f: Frame, y: float, h: float, planned: bool, texts: Rows, tag: str) -> list[str]:
    x1, x2 = f.x(b.start), f.x(b.end)
    w = max(x2 - x1, 1.5)
    crit = f' stroke="{CRITICAL_STROKE}" stroke-width="2"' if b.critical else ""
    cls = "bar crit" if b.critical else "bar"
    out = [
        f'<g data-f="{esc(tag)}"><rect class="{cls}" data-kind="{esc(b.kind)}" '
        f'{span(b.start, b.end)} x="{x1:.1f}" y="{y:.1f}" '
        f'width="{w:.1f}" height="{h}" rx="2" fill="{COLOURS.get(b.kind, "#999")}"{crit}/>'
    ]
    if len(b.segments) > 1:
        for a, c, k in b.segments:
            if k != b.kind:
                sx1, sx2 = f.x(a), f.x(c)
                out.append(
                    f'<rect class="bar seg" {span(a, c)} x="{sx1:.1f}" y="{y + 1:.1f}" '
                    f'width="{max(sx2 - sx1, 1.0):.1f}" height="{h - 2}" fill="{COLOURS[k]}"/>'
                )
    # a batch's name, or only its number ("#7") on a narrow bar
    short = b.short
    if short and text_w(short) + 4 > w and "#" in short:
        short = "#" + short.rsplit("#", 1)[1]
    if short and h >= 13 and text_w(short) + 4 <= w and texts.place(x1, x1 + w, 0.0) is not None:
        cls = "on light" if b.kind in _LIGHT_TEXT else "on"
        out.append(
            f'<text class="{cls}" {span(b.start, b.end)} x="{x1 + 3:.1f}" '
            f'y="{y + h / 2 + 4:.1f}">{esc(short)}</text>'
        )
    out.append(f"<title>{esc(_tip(b, f, planned))}</title></g>")
    return out


def _windows_lane(sec: Section, f: Frame, y: float, row: float) -> list[str]:
    """Every downtime window in one lane: windows that overlap in time are one block naming
    their services."""
    out = [f'<text class="lane" x="4" y="{y + row / 2 + 4:.1f}">downtime windows</text>']
    blocks: list[list] = []
    for svc, a, b, why in sorted(sec.windows, key=lambda w: w[1]):
        if blocks and a < blocks[-1][1]:
            blocks[-1][1] = max(blocks[-1][1], b)
            blocks[-1][2].append((svc, a, b, why))
        else:
            blocks.append([a, b, [(svc, a, b, why)]])
    for a, b, items in blocks:
        x1, x2 = f.x(a), f.x(b)
        services = list(dict.fromkeys(s for s, *_ in items))
        text = ", ".join(services)
        tip = "\n".join(
            f"{s} down {_when(f, wa)} to {_when(f, wb)}: {why}" for s, wa, wb, why in items
        )
        out.append(
            f'<g data-f="{esc(text)}"><rect class="window" {span(a, b)} x="{x1:.1f}" '
            f'y="{y + 3:.1f}" '
            f'width="{max(x2 - x1, 1.5):.1f}" '
            f'height="{row - 6}" fill="{WINDOW_FILL}"/>'
        )
        if x2 - x1 >= text_w(services[0]) + 4:
            out.append(
                f'<text class="on" {span(a, b)} x="{x1 + 3:.1f}" y="{y + row / 2 + 4:.1f}">'
                f"{esc(cut(text, x2 - x1 - 2))}</text>"
            )
        out.append(f"<title>{esc(tip)}</title></g>")
    return out


def timeline_svg(sec: Section) -> str:
    """The chart: marker rows, the axis, the windows lane, then a lane per node (or role)."""
    f = frame_of(sec)
    run = sec.is_run
    row = 36 if run else 22
    top = MARK_ROW * MARK_ROWS
    lanes_top = top + AXIS_H + (row if sec.windows else 0)
    height = lanes_top + row * len(sec.lanes) + 6
    index = {lane: i for i, (lane, _) in enumerate(sec.lanes)}
    parts = [
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="timeline" {zoom_attrs(f, height, top)}>'
    ]
    parts += ['<g class="axis">', *axis_svg(f, height, top), "</g>"]
    if sec.windows:
        parts += _windows_lane(sec, f, top + AXIS_H, row)
    tags = [f"{lane} {g}" for lane, g in sec.lanes]
    for i, name in enumerate(_lane_names(sec)):
        y = lanes_top + i * row
        if i % 2 == 0:
            parts.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{row}" fill="#f5f7fb"/>')
        parts.append(
            f'<text class="lane" x="4" y="{y + row / 2 + 4:.1f}" data-f="{esc(tags[i])}">'
            f"{esc(cut(name, f.label_w - 6))}"
            f"<title>{esc(sec.lanes[i][0])}</title></text>"
        )
    texts = {lane: Rows(1) for lane in index}
    tag = {lane: f"{lane} {g}" for lane, g in sec.lanes}
    for b in sec.planned:
        if b.lane in index:
            y, h = lanes_top + index[b.lane] * row + 2, (15 if run else 18)
            parts += _bar(b, f, y, h, True, texts[b.lane], tag[b.lane])
    actual_texts = {lane: Rows(1) for lane in index}
    for b in sec.actual:
        if b.lane in index:
            y = lanes_top + index[b.lane] * row + 19
            parts += _bar(b, f, y, 15, False, actual_texts[b.lane], tag[b.lane])
    parts += _markers(sec, f, height)
    parts.append("</svg>")
    return "".join(parts)
