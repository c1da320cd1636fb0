"""Tiny server-rendered SVG charts (no JavaScript, no CDN): bar charts and histograms."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe


def _number(value: float) -> str:
    value = float(value)
    if value == int(value) and abs(value) < 1e9:
        return f"{int(value):,}"
    return f"{value:.3g}"


def bar_chart(values: Sequence[float], *, labels: Sequence[str] | None = None, title: str, x_label: str = "",
              width: int = 640, height: int = 220, color: str = "#3867d6",
              tick_every: int | None = None) -> SafeString:
    """Vertical bars, one per value, scaled to the largest; labels under every `tick_every`-th bar.

    Every piece of text is escaped; numbers are formatted here, so the markup is safe to inline.
    """
    left, right, top, bottom = 48, 12, 28, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((float(v) for v in values), default=0.0) or 1.0
    n = max(len(values), 1)
    step = plot_w / n
    tick_every = tick_every or max(1, n // 8)
    title = escape(title)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{title}">',
             f'<text x="{left}" y="18" class="chart-title">{title}</text>']
    for i, value in enumerate(values):
        bar_h = plot_h * float(value) / peak
        label = escape(labels[i] if labels else str(i))
        parts.append(f'<rect x="{left + i * step:.1f}" y="{top + plot_h - bar_h:.1f}" width="{max(step - 1, 0.5):.1f}" '
                     f'height="{bar_h:.1f}" fill="{escape(color)}"><title>{label}: {_number(value)}</title></rect>')
        if labels and i % tick_every == 0:
            parts.append(f'<text x="{left + i * step:.1f}" y="{top + plot_h + 14}" class="chart-tick">{label}</text>')
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="chart-axis"/>')
    parts.append(f'<text x="4" y="{top + 10}" class="chart-tick">{_number(peak)}</text>')
    parts.append(f'<text x="4" y="{top + plot_h}" class="chart-tick">0</text>')
    if x_label:
        parts.append(f'<text x="{left + plot_w / 2 - 40:.0f}" y="{height - 6}" class="chart-label">{escape(x_label)}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - all text above is escaped, the rest are numbers
