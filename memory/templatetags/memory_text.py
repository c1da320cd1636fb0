"""`{{ text|highlight:query }}`: the text, escaped, with the query's words marked."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# Words too common to be worth marking in every line.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "you",
    ]
)


def query_terms(query: str) -> list[str]:
    words = {w.lower() for w in re.findall(r"\w+", query or "") if len(w) > 1 and w.lower() not in STOPWORDS}
    return sorted(words, key=lambda w: (-len(w), w))


@register.filter
def highlight(text: str, query: str) -> SafeString:
    escaped = escape(text or "")
    terms = query_terms(query)
    if not terms:
        return escaped
    # Whole words and their endings ("generator" marks "generators"); escaping never touches \w.
    pattern = re.compile(r"\b(" + "|".join(re.escape(t) for t in terms) + r")\w*", re.IGNORECASE)
    return mark_safe(pattern.sub(lambda m: f"<mark>{m.group(0)}</mark>", str(escaped)))  # noqa: S308 - escaped above
