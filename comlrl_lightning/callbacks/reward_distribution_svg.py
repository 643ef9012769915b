"""A round's reward histograms as the reference (CoMLRL)'s W&B panels: inline SVG, 240 x 80.

:func:`distribution_svg` writes the same markup as the reference, character for character (the
target side orange ``#e87030``, the comparator grey ``#6e6e6e``), so a W&B panel of a run here
looks as a CoMLRL run's; :func:`distribution_panels` gives a round's ``line_plot`` and
``bar_plot`` under the reference's keys ``<namespace>/iteration_NNNN/{line,bar}_plot``.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

WIDTH, HEIGHT = 240, 80
LEFT, RIGHT, TOP, BOTTOM = 29, WIDTH - 10, 14, HEIGHT - 18
PALETTE = {"target": "#e87030", "comparator": "#6e6e6e"}
DEFAULT_COLOR = "#2878d6"
FONT = 'font-family="Arial, sans-serif"'

Series = Sequence[Tuple[str, Union[Sequence[float], np.ndarray]]]


def xml_escape(value: str) -> str:
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def axis_tick(value: float) -> str:
    """A tick label: an integer as such, else 1, 2 or 3 decimals by magnitude (as the reference)."""
    if abs(value - round(value)) < 1e-9:
        return str(int(round(value)))
    if abs(value) >= 1.0:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3f}"


class _Plot:
    """The plot area's coordinates: reward -> x, count -> y."""

    def __init__(self, edges: np.ndarray, max_count: float) -> None:
        self.x_min = float(edges[0])
        self.x_range = max(float(edges[-1] - edges[0]), 1e-12)
        self.max_count = max_count

    def x(self, value: float) -> float:
        return LEFT + ((float(value) - self.x_min) / self.x_range) * (RIGHT - LEFT)

    def y(self, value: float) -> float:
        return BOTTOM - (float(value) / self.max_count) * (BOTTOM - TOP)


def _frame(title: str) -> List[str]:
    return [
        f'<div style="max-width:{WIDTH}px;width:100%;overflow:hidden;">',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'style="display:block;max-width:100%;height:auto;">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{LEFT}" y="9" font-size="7" {FONT} font-weight="700">{xml_escape(title)}</text>',
    ]


def _grid(plot: _Plot, edges: np.ndarray) -> List[str]:
    elements = []
    for tick in np.linspace(float(edges[0]), float(edges[-1]), 5):
        x = int(round(plot.x(float(tick))))
        elements.append(f'<line x1="{x}" y1="{TOP}" x2="{x}" y2="{BOTTOM}" stroke="#dddddd" stroke-width="1"/>')
        elements.append(
            f'<text x="{x}" y="{BOTTOM + 8}" font-size="5.5" {FONT} text-anchor="middle" '
            f'fill="#4d4d4d">{axis_tick(float(tick))}</text>'
        )
    for tick in np.linspace(0.0, plot.max_count, 5):
        y = int(round(plot.y(float(tick))))
        elements.append(f'<line x1="{LEFT}" y1="{y}" x2="{RIGHT}" y2="{y}" stroke="#dddddd" stroke-width="1"/>')
        elements.append(
            f'<text x="{LEFT - 4}" y="{y + 2}" font-size="6" {FONT} text-anchor="end" '
            f'fill="#4d4d4d">{axis_tick(float(tick))}</text>'
        )
    return elements


def _axes() -> List[str]:
    middle_y = (TOP + BOTTOM) / 2
    return [
        f'<line x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}" stroke="#505050" stroke-width="1"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}" stroke="#505050" stroke-width="1"/>',
        f'<text x="{(LEFT + RIGHT) / 2:.1f}" y="{HEIGHT - 3}" font-size="5.5" {FONT} text-anchor="middle">reward</text>',
        f'<text x="7" y="{middle_y:.1f}" font-size="5.5" {FONT} text-anchor="middle" '
        f'transform="rotate(-90 7 {middle_y:.1f})">count</text>',
    ]


def _lines(plot: _Plot, edges: np.ndarray, series: Series) -> List[str]:
    elements, legend_y = _axes(), TOP + 7
    centers = ((edges[:-1] + edges[1:]) / 2.0).tolist()
    for label, counts in series:
        if len(counts) == 0:
            continue
        color = PALETTE.get(label, DEFAULT_COLOR)
        points = [(int(round(plot.x(float(c)))), int(round(plot.y(float(n))))) for c, n in zip(centers, counts)]
        elements.append(
            f'<polyline points="{" ".join(f"{x},{y}" for x, y in points)}" fill="none" stroke="{color}" '
            'stroke-width="1.25" stroke-linejoin="round" stroke-linecap="round"/>'
        )
        elements += [f'<circle cx="{x}" cy="{y}" r="1.4" fill="{color}"/>' for x, y in points]
        elements.append(
            f'<line x1="{RIGHT - 52}" y1="{legend_y}" x2="{RIGHT - 39}" y2="{legend_y}" stroke="{color}" '
            'stroke-width="1.25" stroke-linecap="round"/>'
        )
        elements.append(f'<text x="{RIGHT - 36}" y="{legend_y + 2}" font-size="6" {FONT}>{xml_escape(label)}</text>')
        legend_y += 8
    return elements


def _bars(plot: _Plot, edges: np.ndarray, series: Series) -> List[str]:
    elements = []
    for index in range(len(edges) - 1):
        left, right = plot.x(float(edges[index])), plot.x(float(edges[index + 1]))
        width = max(right - left, 1.0)
        group_left, bar_width = left + width * 0.12, width * 0.76 / max(len(series), 1)
        for position, (label, counts) in enumerate(series):
            y = plot.y(float(counts[index]))
            elements.append(
                f'<rect x="{group_left + position * bar_width:.1f}" y="{y:.1f}" width="{max(bar_width - 0.5, 0.5):.1f}" '
                f'height="{max(BOTTOM - y, 0.0):.1f}" fill="{PALETTE.get(label, DEFAULT_COLOR)}" opacity="0.82"/>'
            )
    elements += _axes()
    legend_y = TOP + 7
    for label, _ in series:
        color = PALETTE.get(label, DEFAULT_COLOR)
        elements.append(
            f'<rect x="{RIGHT - 52}" y="{legend_y - 4}" width="12" height="5" fill="{color}" opacity="0.82"/>'
        )
        elements.append(f'<text x="{RIGHT - 36}" y="{legend_y + 1}" font-size="6" {FONT}>{xml_escape(label)}</text>')
        legend_y += 8
    return elements


def distribution_svg(title: str, edges: np.ndarray, series: Series, kind: str) -> str:
    """The reference's panel markup (``kind``: ``line`` or ``bar``) of ``series`` (label, counts per
    bin); ``""`` when there is nothing to draw (no series; for bars, no series with counts)."""
    if kind == "bar":
        series = [(label, counts) for label, counts in series if len(counts) > 0]
    if not series:
        return ""
    max_count = max([float(np.max(counts)) for _, counts in series if len(counts) > 0] or [1.0])
    plot = _Plot(edges, max(max_count, 1.0))
    drawn = _lines(plot, edges, series) if kind == "line" else _bars(plot, edges, series)
    return "".join(_frame(title) + _grid(plot, edges) + drawn + ["</svg></div>"])


def distribution_panels(
    namespace: str, title: str, iteration: int, edges: np.ndarray, target: Sequence[int], comparator: Sequence[int]
) -> Dict[str, str]:
    """``{<namespace>/iteration_NNNN/line_plot: svg, .../bar_plot: svg}`` of a round's two sides' counts."""
    series = [("target", np.asarray(target)), ("comparator", np.asarray(comparator))]
    panels = {}
    for kind in ("line", "bar"):
        markup = distribution_svg(title, edges, series, kind)
        if markup:
            panels[f"{namespace}/iteration_{iteration:04d}/{kind}_plot"] = markup
    return panels


__all__ = ["axis_tick", "distribution_panels", "distribution_svg", "xml_escape"]
