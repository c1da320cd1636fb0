"""The document view through the real test client, with real uploaded files: a PDF written by fpdf2
and a public Markdown document shipped in an installed package (model2vec's training guide)."""

from __future__ import annotations

import html
import io
import re
from pathlib import Path

import model2vec
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from PIL import Image

from chat.models import MessageMemory
from chat.serializers import MessageMemorySerializer
from corpus import page_images
from corpus.documents import document_url
from corpus.models import Dataset, Memory
from corpus.page_images import pages_cache_dir
from corpus.services.batch_uploads import datasets_upload
from corpus.services.corpora import corpus_create
from tests.documents import written_pdf_bytes
from tests.plugins.api import token_client
from tests.plugins.portal import build_now, login

PAGES = [["The harbour of Alexandria held the great lighthouse, one of the wonders of the ancient world."],
         ["The Rosetta Stone was found in 1799 near the town of Rashid in the Nile delta."],
         ["Glycolysis splits one molecule of glucose into two molecules of pyruvate."]]
GUIDE = Path(model2vec.__file__).parent / "train" / "README.md"


@pytest.fixture
def documents(corpus, owner, django_capture_on_commit_callbacks) -> dict:
    corpus.chunk_size = 64
    corpus.save()
    uploaded = {"history.pdf": written_pdf_bytes(PAGES), "training.md": GUIDE.read_bytes()}
    pdf, guide = (o.dataset for o in datasets_upload(corpus=corpus, user=owner, files=[
        SimpleUploadedFile(name, content) for name, content in uploaded.items()]))
    assert build_now(corpus, owner, django_capture_on_commit_callbacks).status == "succeeded"
    return {"pdf": pdf, "guide": guide, "uploaded": uploaded}


def _memory(dataset: Dataset, **metadata) -> Memory:
    return next(m for m in Memory.objects.filter(dataset=dataset).order_by("hdv_idx")
                if all(m.metadata.get(k) == v for k, v in metadata.items()))


def test_pdf_passage_is_marked_on_its_page_with_the_page_image(documents, member):
    pdf = documents["pdf"]
    passage = _memory(pdf, page=2)
    client = login(member)
    response = client.get(document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk, memory_id=passage.pk))
    page = response.content.decode()
    assert response.status_code == 200
    assert '<strong id="place">page 2</strong>' in page
    assert "Rosetta Stone" in passage.text
    assert f'<mark id="passage">{html.escape(passage.text)}</mark>' in page
    image_url = reverse("corpus:document_page", args=[pdf.corpus_id, pdf.pk, 2])
    assert f'href="{image_url}"' in page
    image = client.get(image_url)
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    with Image.open(io.BytesIO(b"".join(image.streaming_content))) as png:
        assert png.format == "PNG" and max(png.size) <= 1600 and png.size[1] > png.size[0]
    assert client.get(reverse("corpus:document_page", args=[pdf.corpus_id, pdf.pk, 9])).status_code == 404


def test_markdown_passage_is_shown_in_the_text_around_it(documents, member):
    guide = documents["guide"]
    memories = list(Memory.objects.filter(dataset=guide).order_by("hdv_idx"))
    assert len(memories) > 10
    passage = memories[len(memories) // 2]
    response = login(member).get(document_url(corpus_id=guide.corpus_id, document_id=guide.pk,
                                              memory_id=passage.pk))
    page = response.content.decode()
    assert f'<mark id="passage">{html.escape(passage.text)}</mark>' in page
    # The neighbours' text is there once, without the windows' overlap: as the document has it.
    source = GUIDE.read_text()
    start, end = passage.metadata["char_start"], passage.metadata["char_end"]
    assert source[start:end] == passage.text
    before = source[memories[len(memories) // 2 - 4].metadata["char_start"]:start]
    assert html.escape(before) + '<mark id="passage">' in page
    assert page.count(html.escape(passage.text)) == 1


def test_the_original_downloads_byte_identical(documents, member):
    for dataset in (documents["pdf"], documents["guide"]):
        url = reverse("corpus:document_original", args=[dataset.corpus_id, dataset.pk])
        response = login(member).get(url)
        assert response.status_code == 200
        assert f'filename="{dataset.name}"' in response["Content-Disposition"]
        assert b"".join(response.streaming_content) == documents["uploaded"][dataset.name]


def test_an_original_no_longer_kept_is_said_so(documents, member):
    guide = documents["guide"]
    Path(guide.file.path).unlink()
    client = login(member)
    view = client.get(reverse("corpus:document", args=[guide.corpus_id, guide.pk]))
    assert view.status_code == 200 and 'id="original-not-kept"' in view.content.decode()
    assert "Download the original" not in view.content.decode()
    original = client.get(reverse("corpus:document_original", args=[guide.corpus_id, guide.pk]))
    assert original.status_code == 404 and "not kept on this server" in original.content.decode()


def test_outsiders_get_404_for_the_view_the_page_and_the_original(documents, outsider):
    pdf = documents["pdf"]
    passage = _memory(pdf, page=1)
    client = login(outsider)
    for url in (document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk, memory_id=passage.pk),
                reverse("corpus:document_page", args=[pdf.corpus_id, pdf.pk, 1]),
                reverse("corpus:document_original", args=[pdf.corpus_id, pdf.pk])):
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"Rosetta" not in b"".join(getattr(response, "streaming_content", [response.content]))
    # Nor through a corpus of their own: a document is looked up in the corpus the address names.
    own = corpus_create(owner=outsider, name="Mine", hdc_dimensions=1024)
    for name in ("corpus:document", "corpus:document_original"):
        assert client.get(reverse(name, args=[own.pk, pdf.pk])).status_code == 404


def test_a_memory_of_another_document_is_not_shown(documents, member):
    pdf, guide = documents["pdf"], documents["guide"]
    other = Memory.objects.filter(dataset=guide).first()
    url = document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk, memory_id=other.pk)
    assert login(member).get(url).status_code == 404
    not_a_number = reverse("corpus:document", args=[pdf.corpus_id, pdf.pk]) + "?memory=x"
    assert login(member).get(not_a_number).status_code == 404


def test_anonymous_is_sent_to_log_in(documents, client):
    pdf = documents["pdf"]
    for url in (reverse("corpus:document", args=[pdf.corpus_id, pdf.pk]),
                reverse("corpus:document_page", args=[pdf.corpus_id, pdf.pk, 1]),
                reverse("corpus:document_original", args=[pdf.corpus_id, pdf.pk])):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url


def test_the_memory_page_and_a_search_hit_link_to_the_document_at_the_place(documents, member):
    pdf = documents["pdf"]
    passage = _memory(pdf, page=2)
    client = login(member)
    view = document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk, memory_id=passage.pk)
    detail = client.get(reverse("memory:detail", args=[passage.pk])).content.decode()
    assert "<h1>history.pdf, page 2</h1>" in detail
    assert f'<a id="in-document" href="{html.escape(view)}">Open in the document at page 2</a>' in detail
    search = client.get(reverse("memory:search"), {"q": "Rosetta Stone found in 1799"}).content.decode()
    assert "history.pdf, page 2</a></h3>" in search
    assert f'<a class="in-document" href="{html.escape(view)}">in the document</a>' in search


def test_the_api_hit_and_memory_carry_the_place_and_the_document_url(documents, member, no_throttle):
    pdf = documents["pdf"]
    passage = _memory(pdf, page=2)
    client = token_client(member)
    view = document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk, memory_id=passage.pk)
    hits = client.get(f"/api/v1/corpora/{pdf.corpus_id}/search/", {"q": "Rosetta Stone found in 1799"}).json()
    hit = next(h for h in hits["results"] if h["id"] == passage.pk)
    assert (hit["place"], hit["place_label"], hit["document_url"]) == ({"page": 2}, "page 2", view)
    row = client.get(f"/api/v1/memories/{passage.pk}/").json()
    assert (row["place"], row["place_label"], row["document_url"]) == ({"page": 2}, "page 2", view)
    guide_memory = Memory.objects.filter(dataset=documents["guide"]).first()
    # A Markdown memory's place is its heading path and lines (engine.text_places), not a page.
    guide_label = client.get(f"/api/v1/memories/{guide_memory.pk}/").json()["place_label"]
    assert re.search(r"\blines? \d+", guide_label) and "page" not in guide_label, guide_label


def test_a_chat_memory_keeps_its_place_and_links_through_the_memory(documents, member, outsider):
    pdf = documents["pdf"]
    passage = _memory(pdf, page=3)
    shown = MessageMemorySerializer(MessageMemory(
        rank=0, memory_id=passage.pk, memory_key=passage.content_hash, score=1.0, place="page 3")).data
    redirect_url = reverse("memory:in_document", args=[passage.pk])
    assert (shown["place"], shown["document_url"]) == ("page 3", redirect_url)
    response = login(member).get(redirect_url)
    assert response.status_code == 302
    assert response["Location"] == document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk,
                                                memory_id=passage.pk)
    assert login(outsider).get(redirect_url).status_code == 404
    gone = MessageMemorySerializer(MessageMemory(rank=0, memory_id=None, score=1.0, place="page 3")).data
    assert (gone["place"], gone["document_url"]) == ("page 3", "")


def test_a_known_region_is_marked_on_the_page(documents, member):
    """The region an OCR reader records (fractions of the page image) is drawn over the page."""
    pdf = documents["pdf"]
    passage = _memory(pdf, page=1)
    passage.metadata = {**passage.metadata, "region": [0.1, 0.2, 0.6, 0.3]}
    passage.save(update_fields=["metadata"])
    page = login(member).get(document_url(corpus_id=pdf.corpus_id, document_id=pdf.pk,
                                          memory_id=passage.pk)).content.decode()
    # fpdf2's A4 page: 595.28 × 841.89 points.
    assert 'viewBox="0 0 595.28 841.89"' in page
    assert ('<rect class="page-region" id="page-region" x="59.53" y="168.38" width="297.64" height="84.19"/>'
            in page)
    assert "the passage marked" in page


def test_the_page_cache_stays_within_its_bound(documents, member, monkeypatch):
    pdf = documents["pdf"]
    client = login(member)
    first = client.get(reverse("corpus:document_page", args=[pdf.corpus_id, pdf.pk, 1]))
    cached = pages_cache_dir() / pdf.sha256 / "1.png"
    assert first.status_code == 200 and cached.is_file()
    monkeypatch.setattr(page_images, "PAGE_CACHE_MAX_BYTES", cached.stat().st_size)
    second = client.get(reverse("corpus:document_page", args=[pdf.corpus_id, pdf.pk, 2]))
    assert second.status_code == 200 and b"".join(second.streaming_content)[:4] == b"\x89PNG"
    assert not cached.exists() and (pages_cache_dir() / pdf.sha256 / "2.png").is_file()


def test_the_corpus_page_links_each_document_to_its_view(documents, member):
    page = login(member).get(reverse("corpus:detail", args=[documents["pdf"].corpus_id])).content.decode()
    for dataset in (documents["pdf"], documents["guide"]):
        url = reverse("corpus:document", args=[dataset.corpus_id, dataset.pk])
        assert f'<a href="{url}">{dataset.name}</a>' in page
