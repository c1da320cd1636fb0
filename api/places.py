"""Where a memory came from, as the API adds it to a search hit and a memory: its place keys, its place
in words and the document view's address at its passage (`engine.places`, `corpus.documents`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from corpus.documents import document_url
from engine.places import place_label, place_of


class MemoryPlaceFields(serializers.Serializer):
    """`place`, `place_label` and `document_url`; a subclass says where its object keeps the memory's
    metadata, corpus, dataset and row id (`_where`)."""

    place = serializers.SerializerMethodField(help_text=(
        "Where in its document the memory came from: the place keys of its metadata (page, slide, sheet, "
        "rows, columns, headings, lines, message, attachment, region)."))
    place_label = serializers.SerializerMethodField(help_text=(
        'The place in words: "page 12", "slide 4", "Budget!A40:F52"; empty when none is known.'))
    document_url = serializers.SerializerMethodField(help_text=(
        "The document view at this memory's passage (a portal page); empty without a document."))

    def _where(self, obj: Any) -> tuple[dict[str, Any], int, int | None, int | None]:
        """(metadata, corpus id, dataset id, memory row id) of `obj`."""
        raise NotImplementedError

    def get_place(self, obj: Any) -> dict[str, Any]:
        return place_of(self._where(obj)[0])

    def get_place_label(self, obj: Any) -> str:
        return place_label(self._where(obj)[0])

    def get_document_url(self, obj: Any) -> str:
        _, corpus_id, dataset_id, memory_id = self._where(obj)
        return document_url(corpus_id=corpus_id, document_id=dataset_id, memory_id=memory_id)


class ResultPlaceFields(MemoryPlaceFields):
    """For a search result (`memory.services.MemoryResult`)."""

    def _where(self, result: Any) -> tuple[dict[str, Any], int, int | None, int | None]:
        return result.memory.metadata, result.corpus_id, result.dataset_id, result.memory.memory_id


class RowPlaceFields(MemoryPlaceFields):
    """For a memory row (`corpus.models.Memory`)."""

    def _where(self, memory: Any) -> tuple[dict[str, Any], int, int | None, int | None]:
        return memory.metadata, memory.corpus_id, memory.dataset_id, memory.pk
