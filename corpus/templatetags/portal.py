"""Human numbers and words for every page: `{% load portal %}`.

    {{ 1234567|num }}            1,234,567          {{ 0.4567|num:2 }}     0.46
    {{ 3|counted:"corpus,corpora" }}  3 corpora     {{ 1|counted:"record" }}  1 record
    {{ 1168.16|rate }}           1,168/s            {{ 93.5|seconds }}     1 min 34 s
    {{ "text_store"|phase }}     text store
"""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def num(value, digits: int = 0) -> str:  # any number, or "" for None
    if value is None or value == "":
        return ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    digits = int(digits)
    if digits == 0:
        return f"{round(number):,}"
    return f"{number:,.{digits}f}"


@register.filter
def counted(value, nouns: str) -> str:
    """"3 corpora": the count with the singular or plural noun ("corpus,corpora"; "record" adds s)."""
    singular, _, plural = nouns.partition(",")
    count = int(value or 0)
    return f"{count:,} {singular if count == 1 else (plural or singular + 's')}"


@register.filter
def rate(value) -> str:
    if not value:
        return ""
    number = float(value)
    return f"{number:,.0f}/s" if number >= 10 else f"{number:.1f}/s"


@register.filter
def seconds(value) -> str:
    if value is None or value == "":
        return ""
    total = float(value)
    if total < 1:
        return f"{total * 1000:.0f} ms"
    if total < 60:
        return f"{total:.1f} s"
    minutes, rest = divmod(round(total), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


# Build phases in words where their code names say little to a reader (the rest: "_" to " ").
PHASE_NAMES = {"tokenizer": "loading the tokenizer", "activate": "checks before the switch",
               "activation": "switch to the new build", "words": "exact-word index",
               "meaning": "meaning channel (sentence encoder)",
               "text_store": "late-interaction fill", "publish": "publishing to object storage"}


@register.filter
def phase(value: str) -> str:
    return PHASE_NAMES.get(value, (value or "").replace("_", " "))


@register.filter
def ago(value) -> str:  # a datetime
    """"just now", "5 minutes ago", "2 days ago": Django's timesince, without "0 minutes ago"."""
    from django.utils.timesince import timesince

    if not value:
        return ""
    since = timesince(value, depth=1)
    return "just now" if since.startswith("0\xa0") else f"{since} ago"
