"""Memory pages: search across the corpora a user may read, one memory in full, and a corpus's
index statistics."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from corpus.selectors import corpora_visible_to, get_corpus_for_user
from hdrag_site.errors import ApplicationError
from memory.forms import SearchForm
from memory.selectors import get_memory_for_user, memory_neighbours
from memory.services import memories_search
from memory.stats import corpus_stats

ORDERS = ("score", "pipeline")


def _ranked(results: list[dict], order: str) -> list[dict]:
    """Number the results in the pipeline's order (MMR picks), then sort them by score unless the
    pipeline's own order was asked for. Fused searches rank by the fused score, others by HDC."""
    for position, result in enumerate(results, start=1):
        result["pick"] = position
    if order == "pipeline":
        return results
    return sorted(results, key=lambda r: (-(r["fused_score"] if r.get("fused_score") is not None else r["hdc_score"]),
                                          r["pick"]))


@require_GET
def search(request: HttpRequest) -> HttpResponse:
    searchable = list(corpora_visible_to(request.user).filter(active_build__isnull=False).order_by("name"))
    form = SearchForm(request.GET or None, corpora=searchable)
    order = request.GET.get("order") if request.GET.get("order") in ORDERS else "score"
    results, error, elapsed_ms, trace = None, "", None, {}
    if form.is_bound and not form.is_valid() and "q" not in form.errors:
        # Asking for a corpus one may not search (or that has no index) is an answer, not a blank page.
        error = "Some of the chosen corpora cannot be searched: they have no built index or are not shared with you."
        results = []
    elif form.is_bound and form.is_valid():
        chosen = form.cleaned_data["corpora"] or [c.pk for c in searchable]
        started = time.perf_counter()
        try:
            results = _ranked(memories_search(user=request.user, corpus_ids=chosen, query=form.cleaned_data["q"],
                                              top_document=form.cleaned_data["top_document"], trace=trace), order)
        except ApplicationError as exc:
            error, results = exc.message, []
        elapsed_ms = (time.perf_counter() - started) * 1000
    query = form.data.get("q", "") if form.is_bound else ""
    toggled = request.GET.copy()
    toggled["order"] = "score" if order == "pipeline" else "pipeline"
    return render(request, "memory/search.html", {
        "form": form, "results": results, "error": error, "searchable": searchable, "elapsed_ms": elapsed_ms,
        "order": order, "trace": trace, "query": query, "toggle_query": toggled.urlencode()})


@require_GET
def memory_detail(request: HttpRequest, pk: int) -> HttpResponse:
    memory = get_memory_for_user(request.user, pk)
    before, after = memory_neighbours(memory=memory)
    return render(request, "memory/detail.html", {
        "memory": memory, "before": before, "after": after, "query": request.GET.get("q", "")[:2000],
        "serving": memory.build_id in memory.corpus.serving_build_ids})


@require_GET
def stats(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk)
    return render(request, "memory/stats.html", {"corpus": corpus, "stats": corpus_stats(corpus=corpus)})
