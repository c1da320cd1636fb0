"""`{{ memory.metadata|place }}`: a memory's place in words ("page 12", `engine.places.place_label`), and
`{% document_href corpus_id dataset_id memory_id %}`: the document view at that memory's passage."""

from __future__ import annotations

from typing import Any

from django import template

from corpus.documents import document_url
from engine.places import place_label

register = template.Library()


@register.filter
def place(metadata: dict[str, Any] | None) -> str:
    return place_label(metadata)


@register.simple_tag
def document_href(corpus_id: int, dataset_id: int | None, memory_id: int | None) -> str:
    return document_url(corpus_id=corpus_id, document_id=dataset_id, memory_id=memory_id)
