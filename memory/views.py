"""Memory pages: search across the corpora a user may read, and a corpus's index statistics."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from corpus.selectors import corpora_visible_to, get_corpus_for_user
from hdrag_site.errors import ApplicationError
from memory.forms import SearchForm
from memory.services import memories_search
from memory.stats import corpus_stats


@require_GET
def search(request: HttpRequest) -> HttpResponse:
    searchable = list(corpora_visible_to(request.user).filter(active_build__isnull=False).order_by("name"))
    form = SearchForm(request.GET or None, corpora=searchable)
    results, error, elapsed_ms = None, "", None
    if form.is_valid():
        chosen = form.cleaned_data["corpora"] or [c.pk for c in searchable]
        started = time.perf_counter()
        try:
            results = memories_search(user=request.user, corpus_ids=chosen, query=form.cleaned_data["q"],
                                      top_document=form.cleaned_data["top_document"])
        except ApplicationError as exc:
            error = exc.message
        elapsed_ms = (time.perf_counter() - started) * 1000
    return render(request, "memory/search.html", {"form": form, "results": results, "error": error,
                                                  "searchable": searchable, "elapsed_ms": elapsed_ms})


@require_GET
def stats(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk)
    return render(request, "memory/stats.html", {"corpus": corpus, "stats": corpus_stats(corpus=corpus)})
