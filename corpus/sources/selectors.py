"""Reads of sources. Only a corpus's owner and superusers (staff) manage, or see, its sources;
a reader of the corpus is refused (403), anyone else learns nothing (404)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404

from corpus.models import Corpus
from corpus.selectors import User, corpus_can_manage, get_corpus_for_user
from corpus.sources.models import Source, SourceDocument
from corpus.sources.serializers import SourceSerializer


def get_corpus_sources_for_user(user: User, corpus_id: int) -> Corpus:
    """The corpus whose sources `user` manages: 404 for outsiders, 403 for its other readers."""
    corpus = get_corpus_for_user(user, corpus_id)
    if not corpus_can_manage(user=user, corpus=corpus):
        raise PermissionDenied("Only the corpus's owner manages its sources.")
    return corpus


def get_source_for_user(user: User, pk: int) -> Source:
    source = Source.objects.select_related("corpus").filter(pk=pk).first()
    if source is None:
        raise Http404("No such source.")
    try:
        get_corpus_sources_for_user(user, source.corpus_id)
    except Http404:
        raise Http404("No such source.") from None
    return source


def corpus_sources(*, corpus: Corpus) -> list[Source]:
    return list(corpus.sources.order_by("name", "id"))


def source_state(source: Source) -> dict:
    """The JSON-safe view of a source and its last sync, for events, polling, pages and the API
    (`SourceSerializer`). The token is never in it: only whether one is set."""
    return SourceSerializer(source).data


def dataset_source_document(*, dataset_id: int | None) -> SourceDocument | None:
    """Where a dataset's document lives at its source (its path and URL), for the memory page."""
    if dataset_id is None:
        return None
    return SourceDocument.objects.filter(dataset_id=dataset_id).select_related("source").first()
