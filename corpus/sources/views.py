"""The corpus page's sources: add, sync, delete, and the state its script polls. Owner and staff only."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from core.flash import flash
from corpus.sources.models import Source
from corpus.sources.selectors import (
    corpus_sources,
    get_corpus_sources_for_user,
    get_source_for_user,
    source_state,
)
from corpus.sources.services import source_create, source_delete, source_sync_start


class SourceForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Source.Kind.choices)
    location = forms.CharField(max_length=1000, help_text="A folder under SOURCE_ROOTS, a Git https URL, "
                                                          "a start URL, or s3://BUCKET/PREFIX.")
    branch = forms.CharField(max_length=200, required=False)
    token = forms.CharField(max_length=1000, required=False, widget=forms.PasswordInput(render_value=False))
    interval_minutes = forms.IntegerField(min_value=0, max_value=527040, initial=0, required=False)


@require_POST
def source_add(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_sources_for_user(request.user, pk)
    form = SourceForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The source needs a name, a kind and a location.")
        return redirect("corpus:detail", pk=corpus.pk)
    data = form.cleaned_data
    flash(
        request,
        lambda: source_create(
            corpus=corpus,
            user=request.user,
            name=data["name"],
            kind=data["kind"],
            location=data["location"],
            branch=data["branch"],
            token=data["token"],
            interval_minutes=data["interval_minutes"] or 0,
        ),
        lambda source: f"Source {source.name} added: sync it to read its documents.",
    )
    return redirect("corpus:detail", pk=corpus.pk)


@require_POST
def source_sync(request: HttpRequest, pk: int) -> HttpResponse:
    source = get_source_for_user(request.user, pk)
    flash(request, lambda: source_sync_start(source=source, confirm=request.POST.get("confirm") == "1"),
          f"Sync of {source.name} queued.")
    return redirect("corpus:detail", pk=source.corpus_id)


@require_POST
def source_remove(request: HttpRequest, pk: int) -> HttpResponse:
    source = get_source_for_user(request.user, pk)
    flash(request, lambda: source_delete(source=source),
          lambda removed: f"Source {source.name} deleted with its {removed} documents.")
    return redirect("corpus:detail", pk=source.corpus_id)


@require_GET
def source_status(request: HttpRequest, pk: int) -> JsonResponse:
    corpus = get_corpus_sources_for_user(request.user, pk)
    return JsonResponse({"sources": [source_state(s) for s in corpus_sources(corpus=corpus)]})
