"""Plots for the usage page, drawn on the server as inline SVG from the report's numbers: nothing
is loaded from outside the portal (no script, no chart library), and the page's CSP holds."""

from __future__ import annotations

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, AXIS = 720, 180, 28
BAR_COLOUR, LINE_COLOUR = "#4f46e5", "#059669"


def bar_chart(points: list[tuple[str, float]], *, label: str, line: list[float] | None = None,
              line_label: str = "") -> SafeString:
    """Bars of `points` ((x label, value), in order), optionally a line over them on the same scale;
    `label` names the chart for screen readers. Every fifth x label is written, and the first and last."""
    top = max([value for _, value in points] + (line or []) + [1])
    step = (WIDTH - AXIS) / max(len(points), 1)
    plot = HEIGHT - AXIS
    parts = [format_html('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#9ca3af"/>', AXIS, plot, WIDTH, plot),
             format_html('<text x="0" y="12" font-size="11" fill="#6b7280">{}</text>', _number(top))]
    for number, (name, value) in enumerate(points):
        height = plot * value / top
        x = AXIS + number * step
        parts.append(
            format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {}</title></rect>',
                f"{x + 1:.1f}",
                f"{plot - height:.1f}",
                f"{max(step - 2, 1):.1f}",
                f"{height:.1f}",
                BAR_COLOUR,
                name,
                _number(value),
            )
        )
        if number % 5 == 0 or number == len(points) - 1:
            parts.append(
                format_html(
                    '<text x="{}" y="{}" font-size="10" fill="#6b7280">{}</text>',
                    f"{x:.1f}",
                    HEIGHT - 8,
                    name,
                )
            )
    if line:
        coordinates = " ".join(f"{AXIS + (n + 0.5) * step:.1f},{plot - plot * value / top:.1f}"
                               for n, value in enumerate(line))
        parts.append(
            format_html(
                '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"><title>{}</title></polyline>',
                coordinates,
                LINE_COLOUR,
                line_label,
            )
        )
    body = mark_safe("".join(parts))  # every part is format_html output: its values are escaped
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">{}</svg>',
        WIDTH,
        HEIGHT,
        escape(label),
        body,
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.1f}"
