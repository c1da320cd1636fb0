"""The document view: a document's text around a passage, the passage marked and its place named;
for a PDF or an image (OCR), the passage's page as an image with its OCR region outlined; and the
original file, for the people who may read the corpus. Every view finds its document through
`corpus.documents.document_for_user` (404 for outsiders)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.errors import ApplicationError
from corpus.documents import document_for_user, document_memory, document_window, passage_blocks
from corpus.models import Dataset, Memory
from corpus.object_store import fetch_dataset
from corpus.page_images import PAGED_FORMATS, PageSize, PageUnavailable, page_image, page_size
from corpus.sources.selectors import dataset_source_document
from engine.places import place_label

NOT_KEPT = ("The original file of this document is not kept on this server any more; "
            "its memories stay readable here.")


def _original_path(document: Dataset) -> Path | None:
    """The stored upload on this machine (fetched from the object store where one is used), or None."""
    path = Path(document.file.path)
    with contextlib.suppress(ApplicationError):  # the store is down: say what is there, not a 500
        fetch_dataset(document.file.name, path)
    return path if path.is_file() else None


def _page_figure(document: Dataset, passage: Memory | None) -> dict | None:
    """What the template needs to show the passage's page (of a PDF, or an image's frame) with its
    region marked, or None."""
    page = (passage.metadata or {}).get("page") if passage is not None else None
    if document.format not in PAGED_FORMATS or not isinstance(page, int):
        return None
    path = _original_path(document)
    if path is None:
        return None
    try:
        size = page_size(path, page, document_format=document.format)
    except PageUnavailable as error:
        return {"page": page, "error": error.message}
    return {"page": page, "size": size, "region": _region(passage.metadata.get("region"), size)}


def _region(region: object, size: PageSize) -> dict | None:
    """The region (OCR text, a PDF table: fractions of the page, `engine.places`) in the page's points
    (an image's pixels), or None."""
    if not isinstance(region, list) or len(region) != 4:
        return None
    if not all(isinstance(v, int | float) for v in region):
        return None
    left, top, right, bottom = (min(max(float(v), 0.0), 1.0) for v in region)
    if right <= left or bottom <= top:
        return None
    return {"x": left * size.width, "y": top * size.height,
            "width": (right - left) * size.width, "height": (bottom - top) * size.height}


@require_GET
def document_view(request: HttpRequest, pk: int, document_id: int) -> HttpResponse:
    document = document_for_user(request.user, pk, document_id)
    passage = document_memory(document=document, memory_id=request.GET.get("memory"))
    memories = document_window(document=document, passage=passage)
    return render(request, "corpus/document.html", {
        "document": document, "corpus": document.corpus, "passage": passage,
        "place": place_label(passage.metadata) if passage is not None else "",
        "blocks": passage_blocks(memories=memories, passage=passage),
        "figure": _page_figure(document, passage),
        "original_kept": _original_path(document) is not None, "not_kept": NOT_KEPT,
        "at_source": dataset_source_document(dataset_id=document.pk)})


@require_GET
def document_page(request: HttpRequest, pk: int, document_id: int, page: int) -> HttpResponse:
    document = document_for_user(request.user, pk, document_id)
    path = _original_path(document) if document.format in PAGED_FORMATS else None
    if path is None:
        return render(request, "404.html", {"message": "This document has no page images."}, status=404)
    try:
        image = page_image(path=path, sha256=document.sha256, number=page, document_format=document.format)
    except PageUnavailable as error:
        return render(request, "404.html", {"message": error.message}, status=404)
    response = FileResponse(image.open("rb"), content_type="image/png")
    response["Cache-Control"] = "private, max-age=3600"
    return response


@require_GET
def document_original(request: HttpRequest, pk: int, document_id: int) -> HttpResponse:
    document = document_for_user(request.user, pk, document_id)
    path = _original_path(document)
    if path is None:
        return render(request, "404.html", {"message": NOT_KEPT}, status=404)
    return FileResponse(path.open("rb"), as_attachment=True, filename=document.name)
