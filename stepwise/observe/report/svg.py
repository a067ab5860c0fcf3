"""Shared pieces of the report's charts: colours (one per kind of work, one per state of a
run), the frame that maps time to x, the time axis in one unit, and the placement of text
labels so that no two overlap.

Sizes are CSS pixels: each chart is drawn at its own width (never scaled to the window), so
text keeps its 11 px in a narrow window, where the chart scrolls sideways instead."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from stepwise.model.step_kinds import StepKind
from stepwise.model.vocab import UnitState

WIDTH = 1360
AXIS_H = 40
#: the width of a character of the charts' 11 px sans-serif text, generous (labels must
#: never overlap, so an estimate errs wide)
CHAR_W = 7.0
#: a planned bar by the kind of its work; an actual bar by its state
COLOURS: dict[str, str] = {
    StepKind.DISRUPTIVE: "#e8836b",
    StepKind.SOFTWARE: "#7eaee0",
    StepKind.CHECKS: "#a9d18e",
    StepKind.DEPLOYMENT: "#c7a3dc",
    StepKind.PRESTAGE: "#f2d98c",
    UnitState.DONE: "#3a9d5d",
    "late": "#e0a030",
    "resumed": "#7b5fc7",
    UnitState.SKIPPED: "#c8c8c8",
    UnitState.PENDING: "#e4e4e4",
    UnitState.RUNNING: "#4aa3df",
    UnitState.INTERRUPTED: "#c77d7d",
    UnitState.FAILED: "#d33333",
}
#: what each colour means, as the legend says it
MEANING: dict[str, str] = {
    StepKind.DISRUPTIVE: "disruptive: leave, stop, reboot, OS upgrade",
    StepKind.SOFTWARE: "software: packages, config, migrations, start",
    StepKind.CHECKS: "checks: validate, verify",
    StepKind.DEPLOYMENT: "deployment-wide: repos, backup, RPC pins, converge",
    StepKind.PRESTAGE: "prestage: fetch what each node installs, nothing stops",
}
WINDOW_FILL = "#f6c7a8"
CRITICAL_STROKE = "#1d1d1d"


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def text_w(s: str) -> float:
    """The width a label takes on the chart (an estimate that errs wide)."""
    return len(s) * CHAR_W + 4


@dataclass(frozen=True)
class Frame:
    """Where the chart's time axis lies: `label_w` px of lane names, then `axis_s` seconds
    over the rest of `WIDTH`; `t0` the wall-clock start (epoch) when known."""

    axis_s: float
    label_w: float
    t0: float | None = None

    @property
    def chart_w(self) -> float:
        return WIDTH - self.label_w - 16

    @property
    def right(self) -> float:
        return self.label_w + self.chart_w

    def x(self, t: float) -> float:
        return self.label_w + self.chart_w * max(0.0, min(t, self.axis_s)) / self.axis_s


def span(start: float, end: float) -> str:
    """The data attributes of an element drawn from `start` to `end` seconds: the page's zoom
    redraws its x from them."""
    return f'data-t0="{start:.2f}" data-t1="{end:.2f}"'


def zoom_attrs(f: Frame, height: float, top: float) -> str:
    """What the page's zoom needs to map seconds to x and redraw the axis of a chart."""
    t0 = "" if f.t0 is None else f' data-clock="{f.t0:.2f}"'
    return (
        f'data-zoom="{f.axis_s:.2f}" data-lw="{f.label_w:.2f}" data-right="{f.right:.2f}" '
        f'data-axis-y="{top + AXIS_H - 8:.2f}" data-h="{height:.2f}"{t0}'
    )


def frame_for(axis_s: float, names: list[str], t0: float | None) -> Frame:
    """A frame whose label column holds the longest lane name in full (within reason: a name
    longer than ~45 characters is cut, with its full text on hover)."""
    longest = max((text_w(n) for n in names), default=100.0)
    return Frame(max(axis_s, 1e-9), min(max(longest + 12, 130.0), 330.0), t0)


def cut(name: str, width: float) -> str:
    """`name` cut to fit `width` px (an ellipsis says it was cut)."""
    n = int((width - 4) / CHAR_W)
    return name if len(name) <= n else name[: max(n - 1, 1)] + "…"


#: (seconds in the unit, its name, the tick steps in that unit)
_UNITS = (
    (1.0, "s", (1, 2, 5, 10, 15, 30)),
    (60.0, "min", (1, 2, 5, 10, 15, 20, 30, 60)),
    (3600.0, "h", (0.25, 0.5, 1, 2, 3, 6, 12, 24)),
)


def axis_unit(axis_s: float) -> tuple[float, str, float]:
    """The axis' one unit (seconds up to 3 minutes, minutes up to 3 hours, then hours) and a
    tick step in it giving at most 10 ticks."""
    size, name, steps = (
        _UNITS[0] if axis_s <= 180 else _UNITS[1] if axis_s <= 3 * 3600 else _UNITS[2]
    )
    span = axis_s / size
    step = next((s for s in steps if span / s <= 10), steps[-1] * math.ceil(span / 10 / steps[-1]))
    return size, name, step


def _num(v: float) -> str:
    return f"{v:g}"


def clock(t0: float, t: float) -> str:
    return datetime.fromtimestamp(t0 + t, UTC).strftime("%H:%M")


def axis_svg(f: Frame, height: float, top: float = 0.0) -> list[str]:
    """Ticks in one unit (or wall-clock HH:MM when the start is known) and the end time at the
    right edge, below `top`; a tick label too close to the end label is left out."""
    size, unit, step = axis_unit(f.axis_s)
    if f.t0 is not None:
        end = f"end {clock(f.t0, f.axis_s)} UTC"
    else:
        end = f"end {_num(round(f.axis_s / size, 1))} {unit}"
    end_left = f.right - text_w(end)
    y = top + AXIS_H - 8
    out = [
        f'<line x1="{f.right:.1f}" y1="{y - 12}" x2="{f.right:.1f}" y2="{height}" stroke="#999"/>',
        f'<text class="tick" x="{f.right:.1f}" y="{y}" text-anchor="end">{esc(end)}</text>',
    ]
    last_right = -1e9
    i = 0
    while i * step * size <= f.axis_s + 1e-9:
        t = i * step * size
        i += 1
        x = f.x(t)
        label = clock(f.t0, t) if f.t0 is not None else f"{_num(round(t / size, 2))} {unit}"
        w = text_w(label)
        out.append(f'<line x1="{x:.1f}" y1="{y + 2}" x2="{x:.1f}" y2="{height}" stroke="#eee"/>')
        left = x if i == 1 else x - w / 2
        if left > last_right + 4 and left + w < end_left - 4:
            anchor = "start" if i == 1 else "middle"
            out.append(
                f'<text class="tick" x="{x:.1f}" y="{y}" text-anchor="{anchor}">{esc(label)}</text>'
            )
            last_right = left + w
    return out


class Rows:
    """Rows of horizontal space where labels go without overlapping: `place` finds the first
    row where [left, right) is free, or None when every row is taken there."""

    def __init__(self, n: int) -> None:
        self.taken: list[list[tuple[float, float]]] = [[] for _ in range(n)]

    def place(self, left: float, right: float, gap: float = 4.0) -> int | None:
        for i, spans in enumerate(self.taken):
            if all(right + gap <= a or left >= b + gap for a, b in spans):
                spans.append((left, right))
                return i
        return None
