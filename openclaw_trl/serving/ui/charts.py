"""The learning panel's curves as inline SVG: lines through filled points, a legend, whole-number update
ticks, one colour per meaning, and room around the plot so that no point is cut off at the edge.

* :func:`reward_chart`: the average reward per update (``panel.reward_frame``): the kept updates as a line,
  the updates a rollback undid and the rollbacks as points of their own colours;
* :func:`hint_chart`: the share of hints the teacher accepted per update (``panel.hint_frame``).

No Gradio here: the page shows the SVG in an HTML component.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

COLOURS = {
    "update": "#2563eb",  # blue: an update that serves (or served on the way to the serving version)
    "undone by a rollback": "#9ca3af",  # grey: an update a rollback undid
    "rollback (to an earlier version)": "#7c3aed",  # purple: a rollback
    "hints accepted": "#059669",  # green: the share of hints accepted
}
"""One colour per meaning, none used twice."""
LINED = ("update", "hints accepted")
"""The series drawn as a line through their points (the others: points only)."""

WIDTH, HEIGHT = 420, 210
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 26, 52  # room for the axes' labels, the title and the legend


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float]]


def _ticks(low: int, high: int, most: int = 8) -> list[int]:
    """Whole-number ticks from ``low`` to ``high``, at most ``most`` of them."""
    step = max(1, math.ceil((high - low + 1) / most))
    return list(range(low, high + 1, step))


def svg_chart(title: str, series: list[Series], y_range: tuple[float, float], y_label: str) -> str:
    """A line chart of ``series`` (update numbers on x, whole ticks) within ``y_range`` (the range is padded so
    that a point on its edge is drawn whole)."""
    xs = [x for s in series for x, _ in s.points]
    if not xs:
        return ""
    x_low, x_high = min(int(math.floor(min(xs))), 1), max(int(math.ceil(max(xs))), 2)
    y_low, y_high = y_range
    pad_x, pad_y = 0.5, (y_high - y_low) * 0.08
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x_low + pad_x) / (x_high - x_low + 2 * pad_x) * inner_w

    def py(y: float) -> float:
        return TOP + (y_high + pad_y - y) / (y_high - y_low + 2 * pad_y) * inner_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-label="{html.escape(title)}" style="max-width:{WIDTH * 1.4:.0f}px;font-family:sans-serif">',
        f'<text x="{WIDTH / 2}" y="15" text-anchor="middle" font-size="12" fill="currentColor">'
        f"{html.escape(title)}</text>",
    ]
    for y in _y_ticks(y_low, y_high):
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#d1d5db" '
            'stroke-width="0.6"/>'
        )
        out.append(
            f'<text x="{LEFT - 5}" y="{py(y) + 3:.1f}" text-anchor="end" font-size="9" fill="currentColor">'
            f"{y:g}</text>"
        )
    for x in _ticks(x_low, x_high):
        out.append(
            f'<text x="{px(x):.1f}" y="{TOP + inner_h + 13}" text-anchor="middle" font-size="9" '
            f'fill="currentColor">{x}</text>'
        )
    out.append(
        f'<text x="{LEFT + inner_w / 2}" y="{TOP + inner_h + 25}" text-anchor="middle" font-size="9" '
        'fill="currentColor">update</text>'
    )
    out.append(
        f'<text x="10" y="{TOP + inner_h / 2}" text-anchor="middle" font-size="9" fill="currentColor" '
        f'transform="rotate(-90 10 {TOP + inner_h / 2})">{html.escape(y_label)}</text>'
    )
    for s in series:
        colour = COLOURS.get(s.name, "#111827")
        points = sorted(s.points)
        if s.name in LINED and len(points) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in points:
            out.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}">'
                f"<title>{html.escape(s.name)}: update {x:g}, {y:+.2f}</title></circle>"
            )
    out.extend(_legend([s.name for s in series if s.points], TOP + inner_h + 40))
    out.append("</svg>")
    return "".join(out)


def _y_ticks(low: float, high: float) -> list[float]:
    step = (high - low) / 4
    return [round(low + i * step, 6) for i in range(5)]


def _legend(names: list[str], y: float) -> list[str]:
    out, x = [], LEFT
    for name in names:
        colour = COLOURS.get(name, "#111827")
        out.append(f'<circle cx="{x + 4}" cy="{y - 3}" r="4" fill="{colour}"/>')
        out.append(
            f'<text x="{x + 11}" y="{y}" font-size="9" fill="currentColor" class="legend">{html.escape(name)}</text>'
        )
        x += 18 + 5.2 * len(name)
    return out


def _series(frame, y: str, name_of) -> list[Series]:
    by_name: dict[str, list[tuple[float, float]]] = {}
    for _, row in frame.iterrows():
        if row["step"] == row["step"] and row[y] == row[y]:  # NaN (the frame's empty rows): not drawn
            by_name.setdefault(name_of(row), []).append((float(row["step"]), float(row[y])))
    return [Series(name, points) for name, points in by_name.items()]


def reward_chart(frame) -> str:
    """The SVG of ``panel.reward_frame`` (empty when it has no point)."""
    series = _series(frame, "reward", lambda row: row["series"])
    order = list(COLOURS)
    series.sort(key=lambda s: order.index(s.name) if s.name in order else len(order))
    return svg_chart("Average reward per update", series, (-1.0, 1.0), "average reward")


def hint_chart(frame) -> str:
    """The SVG of ``panel.hint_frame`` (empty when it has no point)."""
    series = _series(frame, "hint_accept_rate", lambda row: "hints accepted")
    return svg_chart("Share of hints the teacher accepted", series, (0.0, 1.0), "accepted")
