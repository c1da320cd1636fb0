"""Memory pages: search across the corpora a user may read, one memory in full, and a corpus's
index statistics."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from core.errors import ApplicationError
from corpus.documents import document_url
from corpus.selectors import corpora_visible_to, get_corpus_for_user
from corpus.sources.selectors import dataset_source_document
from memory.forms import SearchForm
from memory.selectors import get_memory_for_user, memory_neighbours
from memory.services import MemoryResult, memories_search
from memory.stats import corpus_stats

ORDERS = ("score", "pipeline")


def _rank_key(result: MemoryResult) -> float:
    """What the search ranked by: across corpora the merge key, in one fused corpus the fused
    score, else the HDC score (`engine.retrieval`)."""
    for score in (result.merge_score, result.fused_score):
        if score is not None:
            return score
    return result.hdc_score


def ranking_basis(results: list[MemoryResult]) -> str:
    """The words the page uses for what the results are ranked by."""
    if any(r.merge_score is not None for r in results):
        return (
            "across corpora: HDC score per unit of the query's length in each corpus, times 1 + the share of "
            "the query's words the corpus's best memories hold (comparable across them)"
        )
    if any(r.meaning_score is not None for r in results):
        return "by the fused ranking (HDC, exact words and meaning)"
    if any(r.fused_score is not None for r in results):
        return "by the fused ranking (HDC and exact words)"
    return "by HDC score"


def _ranked(results: list[MemoryResult], order: str) -> list[MemoryResult]:
    """The results in the pipeline's order (MMR picks, which the page numbers), or sorted by what
    the search ranked by (`_rank_key`; a tie keeps the pipeline's order)."""
    if order == "pipeline":
        return results
    return sorted(results, key=lambda r: -_rank_key(r))


@require_GET
def search(request: HttpRequest) -> HttpResponse:
    searchable = list(corpora_visible_to(request.user).filter(active_build__isnull=False).order_by("name"))
    form = SearchForm(request.GET or None, corpora=searchable)
    order = request.GET.get("order") if request.GET.get("order") in ORDERS else "score"
    results, error, elapsed_ms, trace = None, "", None, {}
    if form.is_bound and not form.is_valid() and "q" not in form.errors:
        # Asking for a corpus one may not search (or that has no index) is an answer, not a blank page.
        error = ("Some of the chosen corpora cannot be searched: they have no built index or are not shared "
                 "with you.")
        results = []
    elif form.is_bound and form.is_valid():
        chosen = form.cleaned_data["corpora"] or [c.pk for c in searchable]
        started = time.perf_counter()
        try:
            results = _ranked(
                memories_search(
                    user=request.user,
                    corpus_ids=chosen,
                    query=form.cleaned_data["q"],
                    top_document=form.cleaned_data["top_document"],
                    trace=trace,
                ),
                order,
            )
        except ApplicationError as exc:
            error, results = exc.message, []
        elapsed_ms = (time.perf_counter() - started) * 1000
    query = form.data.get("q", "") if form.is_bound else ""
    toggled = request.GET.copy()
    toggled["order"] = "score" if order == "pipeline" else "pipeline"
    return render(
        request,
        "memory/search.html",
        {
            "form": form,
            "results": results,
            "error": error,
            "basis": ranking_basis(results or []),
            "searchable": searchable,
            "elapsed_ms": elapsed_ms,
            "order": order,
            "trace": trace,
            "query": query,
            "toggle_query": toggled.urlencode(),
        },
    )


@require_GET
def memory_detail(request: HttpRequest, pk: int) -> HttpResponse:
    memory = get_memory_for_user(request.user, pk)
    before, after = memory_neighbours(memory=memory)
    return render(request, "memory/detail.html", {
        "memory": memory, "before": before, "after": after, "query": request.GET.get("q", "")[:2000],
        "serving": memory.build_id in memory.corpus.serving_build_ids,
        "at_source": dataset_source_document(dataset_id=memory.dataset_id)})


@require_GET
def memory_in_document(request: HttpRequest, pk: int) -> HttpResponse:
    """The document view at a memory's passage (what a chat citation links to: a stored answer keeps
    only the memory's id); the memory's own page when its document is gone."""
    memory = get_memory_for_user(request.user, pk)
    if memory.dataset_id is None:
        return redirect("memory:detail", pk=memory.pk)
    return redirect(document_url(corpus_id=memory.corpus_id, document_id=memory.dataset_id,
                                 memory_id=memory.pk))


@require_GET
def stats(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk)
    return render(request, "memory/stats.html", {"corpus": corpus, "stats": corpus_stats(corpus=corpus)})
