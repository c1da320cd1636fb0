"""Corpus pages. Views validate input and delegate to selectors and services."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from accounts.services.groups import groups_shareable_by
from core.errors import ApplicationError
from core.flash import flash
from corpus.document_access import (
    corpus_datasets,
    dataset_readers_on_upload,
    dataset_readers_set,
    get_dataset_for_user,
    readers_named,
)
from corpus.forms import CorpusForm, DatasetUploadForm
from corpus.integrity import corpus_files_report
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.quotas import storage_usage
from corpus.selectors import (
    build_state,
    corpus_builds,
    corpus_can_manage,
    corpus_can_write,
    corpus_list_for_user,
    get_build_for_user,
    get_corpus_for_user,
)
from corpus.services.appends import merge_due, state_segments
from corpus.services.batch_uploads import datasets_upload, upload_summary
from corpus.services.build_liveness import builds_sweep_stale
from corpus.services.builds import build_cancel, build_start, index_after_upload
from corpus.services.corpora import (
    CorpusSettingsInvalid,
    corpus_create,
    corpus_delete,
    corpus_update,
    dataset_discard,
    dataset_set_enabled,
)
from corpus.services.meaning_jobs import meaning_state
from corpus.services.multivector import StoreUnavailable, store_document_delete, store_documents, store_stats
from corpus.services.sharing import corpus_access_list
from corpus.sources.selectors import corpus_sources
from corpus.sources.views import SourceForm

PAGE_SIZE = 20
STORE_PAGE_SIZE = 50


@require_GET
def corpus_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(corpus_list_for_user(request.user), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "corpus/list.html", {"page": page})


def corpus_new(request: HttpRequest) -> HttpResponse:
    form = CorpusForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        try:
            corpus = corpus_create(owner=request.user, **data)
        except ApplicationError as error:
            _refusals_shown(form, error)
        else:
            messages.success(
                request, f"Corpus {corpus.name!r} created. Upload a dataset, then build its index."
            )
            return redirect("corpus:detail", pk=corpus.pk)
    return render(request, "corpus/form.html", {"form": form, "corpus": None})


def corpus_edit(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk, write=True)
    if not corpus_can_manage(user=request.user, corpus=corpus):
        raise PermissionDenied("Only the owner can change a corpus's settings.")
    form = CorpusForm(request.POST or None, instance=corpus, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            corpus_update(corpus=corpus, **form.cleaned_data)
        except ApplicationError as error:
            _refusals_shown(form, error)
        else:
            if not form.changed_data:
                messages.info(request, "Nothing changed.")
            elif form.rebuild_changed():
                messages.success(request, "Settings saved. Index settings apply to the next build; "
                                          "the rest at once.")
            else:
                messages.success(request, "Settings saved. They apply at once.")
            return redirect("corpus:detail", pk=corpus.pk)
    return render(request, "corpus/form.html", {"form": form, "corpus": corpus})


def _refusals_shown(form: CorpusForm, error: ApplicationError) -> None:
    """The service's refusal on the form: each field's messages beside it, the rest above."""
    if not isinstance(error, CorpusSettingsInvalid):
        form.add_error(None, error.message)
        return
    for field, refusals in error.details.items():
        form.add_error(field if field in form.fields else None, refusals)


@require_POST
def corpus_remove(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk, write=True)
    if not corpus_can_manage(user=request.user, corpus=corpus):
        raise PermissionDenied("Only the owner can delete a corpus.")
    corpus_delete(corpus=corpus)
    messages.success(request, f"Corpus {corpus.name!r} deleted.")
    return redirect("corpus:list")


@require_GET
def corpus_detail(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk)
    builds_sweep_stale(corpus_id=corpus.pk)
    return _detail(request, corpus, DatasetUploadForm())


def _detail(request: HttpRequest, corpus, upload_form: DatasetUploadForm, status: int = 200) -> HttpResponse:
    builds = corpus_builds(corpus=corpus)
    segments = state_segments(corpus)
    context = {
        "corpus": corpus,
        "datasets": corpus_datasets(corpus=corpus, user=request.user),
        "builds": builds,
        "segments": segments,
        "serving": set(corpus.serving_build_ids),
        "state_memories": sum(s.documents or 0 for s in segments),
        "merge_due": merge_due(corpus),
        "segment_limit": settings.SEGMENT_LIMIT,
        "merge_percent": settings.SEGMENT_MERGE_PERCENT,
        "meaning": meaning_state(corpus.pk),
        "can_write": corpus_can_write(user=request.user, corpus=corpus),
        "can_manage": corpus_can_manage(user=request.user, corpus=corpus),
        "upload_form": upload_form,
        "active_build_running": any(b.is_active for b in builds),
        "storage": storage_usage(user=request.user),
        "store": None,
        "store_error": "",
        "files": corpus_files_report(corpus=corpus),
        "access": corpus_access_list(corpus=corpus),
        "visibility_choices": Corpus.Visibility.choices,
        "share_groups": groups_shareable_by(request.user)
        if corpus_can_manage(user=request.user, corpus=corpus)
        else [],
        "sources": corpus_sources(corpus=corpus)
        if corpus_can_manage(user=request.user, corpus=corpus)
        else [],
        "source_form": SourceForm(),
    }
    try:
        context["store"] = store_stats(user=request.user, corpus_id=corpus.pk)
    except StoreUnavailable as error:
        context["store_error"] = error.message
    return render(request, "corpus/detail.html", context, status=status)


@require_GET
def store_document_list(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk)
    context = {"corpus": corpus, "can_write": corpus_can_write(user=request.user, corpus=corpus),
               "page": None, "store_error": ""}
    try:
        documents = store_documents(user=request.user, corpus_id=corpus.pk)
    except StoreUnavailable as error:
        context["store_error"] = error.message
        return render(request, "corpus/store.html", context, status=503)
    context["page"] = Paginator(documents, STORE_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "corpus/store.html", context)


@require_POST
def store_document_remove(request: HttpRequest, pk: int) -> HttpResponse:
    doc_id = request.POST.get("doc_id", "")
    flash(request, lambda: store_document_delete(user=request.user, corpus_id=pk, doc_id=doc_id),
          lambda deleted: f"Deleted {doc_id!r}: {deleted[0]} page and {deleted[1]} chunk embeddings.")
    target = reverse("corpus:store_documents", args=[pk])
    page = request.POST.get("page", "")
    return redirect(f"{target}?page={page}" if page.isdigit() else target)


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


@require_POST
def dataset_add(request: HttpRequest, pk: int) -> HttpResponse:
    """One or more files (or ZIPs of files), each stored or refused on its own. The page's script
    sends one file per request (for per-file progress) and asks for JSON; the plain form gets
    one message per file."""
    corpus = get_corpus_for_user(request.user, pk, write=True)
    files = request.FILES  # parses the body; the upload handler records refused files on the request
    form = DatasetUploadForm(request.POST, files, upload_errors=getattr(request, "upload_errors", {}))
    outcomes = []
    readers = _upload_readers(form)
    if readers is not None:
        outcomes = datasets_upload(corpus=corpus, user=request.user, files=form.cleaned_data["file"])
        for outcome in outcomes:
            if outcome.dataset is not None:
                dataset_readers_on_upload(dataset=outcome.dataset, users=readers[0], groups=readers[1])
    refused = [o.error for o in outcomes if o.dataset is None] + form.errors.get("file", []) \
        + form.non_field_errors()
    stored = [o for o in outcomes if o.dataset is not None]
    job = index_after_upload(corpus=corpus, user=request.user) if stored else None
    if _wants_json(request):
        results = [o.as_json() for o in outcomes] or [{"ok": False, "error": e} for e in refused]
        return JsonResponse({"results": results, "indexing": _indexing_note(corpus, job) if stored else ""},
                            status=200 if stored else 400)
    if not stored:
        for outcome in outcomes:
            form.add_error("file", outcome.error)
        return _detail(request, corpus, form, status=400)
    for outcome in stored:
        messages.success(request, f"Uploaded {upload_summary(outcome.dataset)}.")
    for error in refused:
        messages.error(request, error)
    messages.info(request, _indexing_note(corpus, job))
    return redirect("corpus:detail", pk=corpus.pk)


def _upload_readers(form: DatasetUploadForm) -> tuple[list, list] | None:
    """The readers the upload form names (people, groups), or None when the form is invalid or
    names someone who does not exist (the form then says who, and no file is stored)."""
    if not form.is_valid():
        return None
    try:
        return readers_named(users=form.cleaned_data["reader_users"].split(","),
                             groups=form.cleaned_data["reader_groups"].split(","))
    except ApplicationError as error:
        form.add_error(None, error.message)
        return None


def _indexing_note(corpus: Corpus, job: IndexBuild | None) -> str:
    if job is not None and job.kind == IndexBuild.Kind.APPEND:
        return "Indexing the new datasets: they are searchable in a few seconds (see the build list)."
    if job is not None:
        return "Building the index: the datasets are searchable when the build ends."
    if settings.INDEX_ON_UPLOAD and corpus.append_on_upload and corpus.builds.filter(
            status__in=IndexBuild.ACTIVE_STATUSES).exists():
        return "The new datasets are indexed as soon as the running job ends."
    return "Build the index to make the new datasets searchable."


@require_POST
def dataset_toggle(request: HttpRequest, pk: int) -> HttpResponse:
    dataset = get_dataset_for_user(request.user, pk, write=True)
    dataset_set_enabled(dataset=dataset, enabled=request.POST.get("enabled") == "1")
    state = "enabled" if dataset.enabled else "disabled"
    messages.success(request, f"{dataset.name} {state} for search.")
    return redirect("corpus:detail", pk=dataset.corpus_id)


def _readers_set(dataset: Dataset, users: str, groups: str) -> Dataset:
    named_users, named_groups = readers_named(users=users.split(","), groups=groups.split(","))
    return dataset_readers_set(dataset=dataset, users=named_users, groups=named_groups)


@require_POST
def dataset_readers(request: HttpRequest, pk: int) -> HttpResponse:
    """The document's own readers, from its row on the corpus page (owner and writers)."""
    dataset = get_dataset_for_user(request.user, pk, write=True)
    users, groups = request.POST.get("users", ""), request.POST.get("groups", "")
    flash(request, lambda: _readers_set(dataset, users, groups),
          lambda done: f"{done.name}: " + ("read by the readers named." if done.restricted
                                           else "read by the corpus's readers."))
    return redirect("corpus:detail", pk=dataset.corpus_id)


@require_POST
def dataset_remove(request: HttpRequest, pk: int) -> HttpResponse:
    dataset = get_dataset_for_user(request.user, pk, write=True)
    dataset_discard(dataset=dataset)
    messages.success(request, f"{dataset.name} deleted; rebuild the index to drop its memories for good.")
    return redirect("corpus:detail", pk=dataset.corpus_id)


@require_POST
def build_new(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = get_corpus_for_user(request.user, pk, write=True)
    flash(
        request,
        lambda: build_start(corpus=corpus, user=request.user),
        lambda build: f"Build #{build.number} queued.",
    )
    return redirect("corpus:detail", pk=corpus.pk)


@require_POST
def build_stop(request: HttpRequest, pk: int) -> HttpResponse:
    build = get_build_for_user(request.user, pk, write=True)
    flash(request, lambda: build_cancel(build=build), f"Cancellation of build #{build.number} requested.")
    return redirect("corpus:detail", pk=build.corpus_id)


@require_GET
def build_status(request: HttpRequest, pk: int) -> JsonResponse:
    """Polling fallback for the live progress bar (and for the embedded mode's separate worker)."""
    corpus = get_corpus_for_user(request.user, pk)
    return JsonResponse({"active_build": corpus.active_build_id,
                         "builds": [build_state(b) for b in corpus_builds(corpus=corpus, limit=10)],
                         "meaning": meaning_state(corpus.pk)})
