"""Tiny server-rendered SVG charts (no JavaScript, no CDN): vertical bars and horizontal bars.

Every piece of text is escaped; numbers are formatted here, so the markup is safe to inline.
Value axes get "nice" ticks (1, 2 or 5 × 10^k steps): whole numbers for counts, never 128.12.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe


def _number(value: float) -> str:
    value = float(value)
    if value == int(value) and abs(value) < 1e9:
        return f"{int(value):,}"
    return f"{value:.3g}"


def nice_ticks(peak: float, *, integer: bool, count: int = 4) -> list[float]:
    """Ticks from 0 past `peak` in steps of 1, 2 or 5 × 10^k (at least 1 when `integer`)."""
    if peak <= 0:
        return [0.0, 1.0]
    raw = peak / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    if integer:
        step = max(1.0, float(round(step)))
    ticks = [0.0]
    while ticks[-1] < peak:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def bar_chart(values: Sequence[float], *, labels: Sequence[str] | None = None, title: str, x_label: str = "",
              width: int = 640, height: int = 220, color: str = "#3867d6", tick_every: int | None = None,
              integer: bool = True) -> SafeString:
    """Vertical bars, one per value, on a value axis with nice ticks; a label under every
    `tick_every`-th bar (default: about 8 labels). `integer`: the values are counts."""
    left, right, top, bottom = 56, 12, 28, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    ticks = nice_ticks(max((float(v) for v in values), default=0.0), integer=integer)
    peak = ticks[-1]
    n = max(len(values), 1)
    step = plot_w / n
    tick_every = tick_every or max(1, math.ceil(n / 8))
    title = escape(title)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{title}">',
             f'<title>{title}</title><text x="{left}" y="18" class="chart-title">{title}</text>']
    for tick in ticks:
        y = top + plot_h - plot_h * tick / peak
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" class="chart-grid"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 3:.1f}" text-anchor="end" '
            f'class="chart-tick">{_number(tick)}</text>'
        )
    for i, value in enumerate(values):
        bar_h = plot_h * float(value) / peak
        label = escape(labels[i] if labels else str(i))
        parts.append(
            f'<rect x="{left + i * step:.1f}" y="{top + plot_h - bar_h:.1f}" '
            f'width="{max(step - 1, 0.5):.1f}" '
            f'height="{bar_h:.1f}" fill="{escape(color)}"><title>{label}: {_number(value)}</title></rect>'
        )
        if labels and i % tick_every == 0:
            parts.append(
                f'<text x="{left + i * step:.1f}" y="{top + plot_h + 14}" class="chart-tick">{label}</text>'
            )
    parts.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="chart-axis"/>'
    )
    if x_label:
        parts.append(
            f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle" class="chart-label">'
            f"{escape(x_label)}</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - all text above is escaped, the rest are numbers


def hbar_chart(items: Sequence[tuple[str, float]], *, title: str, width: int = 640, color: str = "#0fb9b1",
               row_height: int = 20, label_chars: int = 28) -> SafeString:
    """Horizontal bars, one row per (label, value), so any number of long labels stays readable;
    the value is printed at the end of each bar. Callers cap the rows (top N and "others")."""
    left, right, top = 12 + 6 * label_chars, 60, 28
    plot_w = width - left - right
    ticks = nice_ticks(max((float(v) for _, v in items), default=0.0), integer=True)
    peak = ticks[-1]
    height = top + row_height * max(len(items), 1) + 24
    title = escape(title)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{title}">',
             f'<title>{title}</title><text x="12" y="18" class="chart-title">{title}</text>']
    bottom = top + row_height * len(items)
    for tick in ticks:
        x = left + plot_w * tick / peak
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="chart-grid"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" '
            f'class="chart-tick">{_number(tick)}</text>'
        )
    for i, (label, value) in enumerate(items):
        y = top + i * row_height
        shown = label if len(label) <= label_chars else label[: label_chars - 1] + "…"
        bar_w = plot_w * float(value) / peak
        parts.append(
            f'<text x="{left - 6}" y="{y + row_height * 0.7:.1f}" text-anchor="end" class="chart-tick">'
            f"<title>{escape(label)}</title>{escape(shown)}</text>"
        )
        parts.append(
            f'<rect x="{left}" y="{y + 3}" width="{bar_w:.1f}" height="{row_height - 6}" '
            f'fill="{escape(color)}">'
            f"<title>{escape(label)}: {_number(value)}</title></rect>"
        )
        parts.append(
            f'<text x="{left + bar_w + 4:.1f}" y="{y + row_height * 0.7:.1f}" '
            f'class="chart-tick">{_number(value)}</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - all text above is escaped, the rest are numbers
