"""Time-series charts as inline SVG, for the report page: pure functions, no I/O, no network.

A chart guarantees: every series drawn on one time axis over [start, end], ticks labelled in UTC
and the display zone's time, markers (restarts, deploys) as labelled vertical lines, findings as shaded spans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape

from spyglass.collectors.clock import display_zone, zone, zone_label

WIDTH, HEIGHT = 1240, 250
LEFT, RIGHT, TOP, BOTTOM = 84, 44, 34, 56
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[datetime, float]]
    dashed: bool = False
    bars: bool = False
    color: str | None = None  # None: the palette's next colour


@dataclass(frozen=True)
class Marker:
    at: datetime
    label: str
    color: str = "#555"


@dataclass
class Chart:
    title: str
    unit: str
    series: list[Series] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    spans: list[tuple[datetime, datetime, str]] = field(default_factory=list)


def nice_step(span: float, target: int = 4) -> float:
    """A 1/2/5 x 10^n step giving about `target` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def binary_step(span: float, target: int = 4) -> float:
    """A power-of-two step (bytes: 1, 2, 4, 8, 16 GiB ...) giving at most about `target` ticks over `span`."""
    if span <= 0:
        return 1.0
    return float(2 ** math.ceil(math.log2(span / target)))


LABEL_CHAR = 6.8  # px a character of an 11 px marker label takes, at most (digits and capitals are widest)


def label_row(
    rows: list[list[tuple[float, float]]], at: float, width: float, lo: float, hi: float
) -> tuple[int, float, str] | None:
    """Where a marker's label goes: (row, x, anchor). To the right of its line, else to the left when it
    would run past the plot's right edge; on the first row where it overlaps no label already there; None
    when no row has room (the marker keeps its tooltip). `rows` holds each row's occupied spans."""
    for start, anchor in ((at + 3, "start"), (at - 3 - width, "end")):
        if start < lo or start + width > hi:
            continue
        for n, spans in enumerate(rows):
            if all(start + width + 4 <= a or start >= b + 4 for a, b in spans):
                spans.append((start, start + width))
                return n, (start if anchor == "start" else start + width), anchor
    return None


def time_step(seconds: float) -> timedelta:
    for step in (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800):
        if seconds / step <= 8:
            return timedelta(seconds=step)
    return timedelta(days=30)


def human(value: float, unit: str) -> str:
    if unit == "bytes":
        for scale, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value:.3g} B"
    return f"{value:.3g}"


def svg(chart: Chart, start: datetime, end: datetime) -> str:
    """The chart as one <svg> element."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    total = max((end - start).total_seconds(), 1.0)
    values = [v for s in chart.series for _, v in s.points]
    top = max(values, default=1.0) or 1.0
    step = binary_step(top) if chart.unit == "bytes" else nice_step(top)
    top = math.ceil(top / step) * step

    def x(t: datetime) -> float:
        return LEFT + plot_w * min(max((t - start).total_seconds() / total, 0.0), 1.0)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        f' role="img" aria-label="{escape(chart.title)}" class="chart">',
        f'<text x="{LEFT}" y="18" class="chart-title">{escape(chart.title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#ccc"/>',
    ]
    for a, b, label in chart.spans:
        out.append(
            f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 2):.1f}" height="{plot_h}"'
            f' fill="#fbe3b5" opacity="0.6"><title>{escape(label)}</title></rect>'
        )
    tick = 0.0
    while tick <= top + 1e-9:
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" class="tick">'
            f"{escape(human(tick, chart.unit))}</text>"
        )
        tick += step
    every = time_step(total)
    t = datetime.fromtimestamp(
        math.ceil(start.timestamp() / every.total_seconds()) * every.total_seconds(), start.tzinfo
    )
    while t <= end:
        local = t.astimezone(zone(display_zone()))
        fmt = "%H:%M" if every < timedelta(days=1) else "%m-%d"
        out.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#f3f3f3"/>'
            f'<text x="{x(t):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" class="tick">'
            f'{t:{fmt}} UTC</text><text x="{x(t):.1f}" y="{TOP + plot_h + 30}" text-anchor="middle"'
            f' class="tick bj">{local:{fmt}} {zone_label(display_zone(), t)}</text>'
        )
        t += every
    legend_x = LEFT + 8.5 * len(chart.title) + 24
    for n, s in enumerate(chart.series):
        color = s.color or PALETTE[n % len(PALETTE)]
        out.append(series_svg(s, color, x, y, TOP + plot_h))
        out.append(
            f'<rect x="{legend_x}" y="9" width="12" height="10" fill="{color}"/>'
            f'<text x="{legend_x + 16}" y="18" class="legend">{escape(s.name)}</text>'
        )
        legend_x += 30 + 7 * len(s.name)
    rows: list[list[tuple[float, float]]] = [[], [], []]  # labels on three rows, inside the plot, never overlapping
    for m in chart.markers:
        out.append(
            f'<line x1="{x(m.at):.1f}" x2="{x(m.at):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="{m.color}"'
            f' stroke-dasharray="3,3"><title>{escape(m.label)}</title></line>'
        )
        placed = label_row(rows, x(m.at), LABEL_CHAR * len(m.label), LEFT + 2, LEFT + plot_w - 2)
        if placed is not None:
            row, at, anchor = placed
            out.append(
                f'<text x="{at:.1f}" y="{TOP + 12 + 13 * row}" text-anchor="{anchor}" class="marker"'
                f' fill="{m.color}">{escape(m.label)}</text>'
            )
    if not values:
        out.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" class="empty">'
            "no data in the window</text>"
        )
    out.append(
        f'<text x="14" y="{TOP + plot_h / 2}" class="unit" transform="rotate(-90 14 {TOP + plot_h / 2})"'
        f' text-anchor="middle">{escape(chart.unit)}</text></svg>'
    )
    return "".join(out)


def series_svg(s: Series, color: str, x, y, baseline: float) -> str:
    if not s.points:
        return ""
    if s.bars:
        width = max(2.0, (WIDTH - LEFT - RIGHT) / max(len(s.points), 1) * 0.6)
        return "".join(
            f'<rect x="{x(t) - width / 2:.1f}" y="{y(v):.1f}" width="{width:.1f}"'
            f' height="{max(baseline - y(v), 0):.1f}" fill="{color}"><title>{v:g}</title></rect>'
            for t, v in s.points
        )
    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s.points)
    dash = ' stroke-dasharray="6,4"' if s.dashed else ""
    dots = (
        "".join(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2" fill="{color}"/>' for t, v in s.points)
        if len(s.points) <= 200 and not s.dashed
        else ""
    )
    return f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>{dots}'
