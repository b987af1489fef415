"""The cohort page's pictures: bar charts as inline SVG, written here.

Two kinds of chart, both bars of counts, are all index.html draws, so the page writes its
own SVG (a few dozen lines, tested in tests/test_cohort_page.py and in a browser) rather
than depending on a plotting library: the page stays one small file that works offline,
its text is real text (searchable, scaled with the page, read by screen readers through
each chart's title and description), and its colours are the page's CSS variables, so the
charts follow light and dark mode. docs/outputs.md says more.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

_BAR = 26  # a horizontal bar's height, gap included
_LABEL = 13  # px: the charts' text


def _text(x: float, y: float, text: str, anchor: str = "middle", cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{klass}>{html.escape(text)}</text>'


def column_chart(
    counts: Sequence[int],
    labels: Sequence[str],
    title: str,
    description: str,
    axis: str,
    tips: Sequence[str] = (),
    highlight_last: bool = False,
) -> str:
    """Vertical bars (one per count) over `labels`, each bar's count above it, `axis`
    under the labels; `tips`: each bar's tooltip. The last bar may be drawn in the
    accent colour (full marks)."""
    width, height, top, bottom, left = 360, 190, 22, 44, 8
    plot = height - top - bottom
    step = (width - 2 * left) / max(1, len(counts))
    most = max(counts, default=0) or 1
    parts = []
    for i, (count, label) in enumerate(zip(counts, labels, strict=True)):
        bar = plot * count / most
        x = left + i * step + step * 0.12
        y = top + plot - bar
        cls = "bar accent" if highlight_last and i == len(counts) - 1 else "bar"
        tip = tips[i] if tips else f"{label}: {count}"
        parts.append(
            f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{step * 0.76:.1f}" '
            f'height="{max(bar, 0.0):.1f}"><title>{html.escape(tip)}</title></rect>'
        )
        if count:
            parts.append(_text(x + step * 0.38, y - 5, str(count), cls="count"))
        parts.append(_text(x + step * 0.38, top + plot + 16, label))
    parts.append(
        f'<line class="axis" x1="{left}" y1="{top + plot}" x2="{width - left}" y2="{top + plot}"/>'
    )
    parts.append(_text(width / 2, height - 6, axis, cls="caption"))
    return _svg(width, height, title, description, parts)


def row_chart(counts: Sequence[int], labels: Sequence[str], title: str, description: str) -> str:
    """Horizontal bars, one row per count, labelled on the left, the count at the bar's
    end: for categories whose names are words (levels)."""
    width, label_width, right = 360, 150, 34
    height = _BAR * len(counts) + 8
    most = max(counts, default=0) or 1
    span = width - label_width - right
    parts = []
    for i, (count, label) in enumerate(zip(counts, labels, strict=True)):
        y = 4 + i * _BAR
        bar = span * count / most
        shown = label if len(label) <= 22 else label[:21] + "…"
        parts.append(_text(label_width - 8, y + _BAR / 2 + 4, shown, anchor="end"))
        parts.append(
            f'<rect class="bar" x="{label_width}" y="{y + 3}" width="{bar:.1f}" '
            f'height="{_BAR - 8}"><title>{html.escape(f"{label}: {count}")}</title></rect>'
        )
        parts.append(_text(label_width + bar + 5, y + _BAR / 2 + 4, str(count), "start", "count"))
    return _svg(width, height, title, description, parts)


def _svg(width: int, height: float, title: str, description: str, parts: list[str]) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height:.0f}" role="img" '
        f'aria-labelledby="{_id(title)}-t {_id(title)}-d" font-size="{_LABEL}">'
        f'<title id="{_id(title)}-t">{html.escape(title)}</title>'
        f'<desc id="{_id(title)}-d">{html.escape(description)}</desc>' + "".join(parts) + "</svg>"
    )


def _id(title: str) -> str:
    return "c" + "".join(c if c.isalnum() else "-" for c in title.lower())
