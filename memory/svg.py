"""Tiny server-rendered SVG charts (no JavaScript, no CDN): bars and histograms."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe


def bar_chart(values: Sequence[float], *, labels: Sequence[str] | None = None, title: str, x_label: str = "", width: int = 640, height: int = 220, color: str = "#3867d6",
              tick_every: int | None = None) -> SafeString:
    """Vertical bars, one per value, scaled to the largest; labels under every `tick_every`-th bar."""
    left, right, top, bottom = 48, 12, 28, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((float(v) for v in values), default=0.0) or 1.0
    n = max(len(values), 1)
    step = plot_w / n
    tick_every = tick_every or max(1, n // 8)
    parts = [format_html('<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">', width, height, title),
             format_html('<text x="{}" y="18" class="chart-title">{}</text>', left, title)]
    for i, value in enumerate(values):
        bar_h = plot_h * float(value) / peak
        label = labels[i] if labels else str(i)
        parts.append(format_html(
            '<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}"><title>{}: {}</title></rect>',
            left + i * step, top + plot_h - bar_h, max(step - 1, 0.5), bar_h, color, label, _number(value)))
        if labels and i % tick_every == 0:
            parts.append(format_html('<text x="{:.1f}" y="{}" class="chart-tick">{}</text>',
                                     left + i * step, top + plot_h + 14, label))
    parts.append(format_html('<line x1="{}" y1="{}" x2="{}" y2="{}" class="chart-axis"/>',
                             left, top + plot_h, left + plot_w, top + plot_h))
    parts.append(format_html('<text x="4" y="{}" class="chart-tick">{}</text>', top + 10, _number(peak)))
    parts.append(format_html('<text x="4" y="{}" class="chart-tick">0</text>', top + plot_h))
    if x_label:
        parts.append(format_html('<text x="{}" y="{}" class="chart-label">{}</text>', left + plot_w / 2 - 40,
                                 height - 6, x_label))
    parts.append(mark_safe("</svg>"))  # noqa: S308 - constant markup
    return mark_safe("".join(str(p) for p in parts))  # noqa: S308 - every part is escaped above


def _number(value: float) -> str:
    value = float(value)
    if value == int(value) and abs(value) < 1e9:
        return f"{int(value):,}"
    return escape(f"{value:.3g}")
