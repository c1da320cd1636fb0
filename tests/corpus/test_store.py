"""The corpus's multi-vector store in the portal: stats, documents, deletions, access, outages.

Real Chroma throughout: embedded in a per-test directory, and once a real `chroma run` server
(the session fixture of the engine's store tests). Records are random float32 (n, 768) arrays
added through `corpus.chroma.store_for`, the way integrations push them.
"""

from __future__ import annotations

import logging

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from django.db import transaction
from django.urls import reverse

from corpus.chroma import collection_names, drop_store, store_for
from corpus.models import Corpus
from corpus.services.corpora import corpus_create
from corpus.services.multivector import store_documents
from engine.llama_server import free_port
from tests.plugins.portal import login

DIM = 768


@pytest.fixture(autouse=True)
def chroma_path(settings, tmp_path):
    """An embedded Chroma of this test's own (settings.CHROMA_PATH is fixed at import)."""
    settings.CHROMA_URL = ""
    settings.CHROMA_PATH = tmp_path / "chroma"
    return settings.CHROMA_PATH


def add_document(corpus: Corpus, doc_id: str, *, pages: int, chunks: int, seed: int = 0) -> None:
    """`pages` visual and `chunks` text records of `doc_id`, each a random (3, 768) float32 sequence."""
    rng = np.random.default_rng(seed)
    store = store_for(corpus.pk)
    meta = {"filename": f"{doc_id}.pdf", "source_path": f"/uploads/{doc_id}.pdf"}
    if pages:
        store.add_batch_visual(doc_id, list(range(1, pages + 1)),
                               [rng.standard_normal((3, DIM)).astype(np.float32) for _ in range(pages)], meta)
    if chunks:
        store.add_batch_text(doc_id, list(range(chunks)),
                             [rng.standard_normal((3, DIM)).astype(np.float32) for _ in range(chunks)],
                             {**meta, "text": f"chunk text of {doc_id}"})


def raw_client(settings):  # noqa: ANN001, ANN201
    """A chromadb client of its own, not the portal's ChromaClient, to check what is really stored."""
    if settings.CHROMA_URL:
        host, port = settings.CHROMA_URL.removeprefix("http://").split(":")
        return chromadb.HttpClient(host=host, port=int(port), settings=Settings(anonymized_telemetry=False))
    return chromadb.PersistentClient(
        path=str(settings.CHROMA_PATH), settings=Settings(anonymized_telemetry=False)
    )


def collections(settings) -> dict[str, int]:  # noqa: ANN001
    """Every collection on the Chroma the settings name → its record count."""
    client = raw_client(settings)
    names = [getattr(found, "name", found) for found in client.list_collections()]
    return {name: client.get_collection(name).count() for name in names}


def doc_counts(corpus: Corpus) -> dict[str, tuple[int, int]]:
    return {d.doc_id: (d.pages, d.chunks) for d in store_documents(user=corpus.owner, corpus_id=corpus.pk)}


@pytest.fixture
def other(owner) -> Corpus:
    return corpus_create(owner=owner, name="Other corpus", hdc_dimensions=1024)


def test_owner_sees_empty_state_then_stats(corpus, owner):
    client = login(owner)
    page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert "No embeddings yet" in page and "README" in page
    add_document(corpus, "q3-report", pages=3, chunks=4)
    add_document(corpus, "memo", pages=1, chunks=2, seed=1)
    response = client.get(reverse("corpus:detail", args=[corpus.pk]))
    page = response.content.decode()
    assert response.status_code == 200 and "No embeddings yet" not in page
    for figure, label in ((2, "documents"), (4, "visual records"), (6, "text records")):
        assert f"<strong>{figure}</strong><span>{label}" in page, label
    assert "approximate size" in page and reverse("corpus:store_documents", args=[corpus.pk]) in page


def test_store_documents_lists_counts_and_paginates(corpus, owner):
    add_document(corpus, "q3-report", pages=3, chunks=4)
    add_document(corpus, "pages-only", pages=2, chunks=0)
    add_document(corpus, "chunks-only", pages=0, chunks=5)
    assert doc_counts(corpus) == {"q3-report": (3, 4), "pages-only": (2, 0), "chunks-only": (0, 5)}
    for index in range(50):
        add_document(corpus, f"bulk-{index:02d}", pages=1, chunks=0)
    client = login(owner)
    url = reverse("corpus:store_documents", args=[corpus.pk])
    first, second = client.get(url).content.decode(), client.get(url, {"page": 2}).content.decode()
    assert "53 documents" in first and "Page 1 of 2" in first and "Page 2 of 2" in second
    assert first.count('name="doc_id"') == 50 and second.count('name="doc_id"') == 3
    # sorted by doc_id: the last three are on page 2
    assert all(f'value="{d}"' in second for d in ("chunks-only", "pages-only", "q3-report"))


def test_outsider_gets_404_and_deletes_nothing(corpus, outsider):
    add_document(corpus, "q3-report", pages=3, chunks=4)
    client = login(outsider)
    assert client.get(reverse("corpus:store_documents", args=[corpus.pk])).status_code == 404
    response = client.post(reverse("corpus:store_document_delete", args=[corpus.pk]), {"doc_id": "q3-report"})
    assert response.status_code == 404
    assert doc_counts(corpus) == {"q3-report": (3, 4)}


def test_read_only_member_lists_but_cannot_delete(corpus, member):
    add_document(corpus, "q3-report", pages=3, chunks=4)
    client = login(member)
    page = client.get(reverse("corpus:store_documents", args=[corpus.pk])).content.decode()
    assert "q3-report" in page and ">Delete</button>" not in page
    response = client.post(reverse("corpus:store_document_delete", args=[corpus.pk]), {"doc_id": "q3-report"})
    assert response.status_code == 403
    assert doc_counts(corpus) == {"q3-report": (3, 4)}


def test_writer_deletes_a_document_from_both_collections(corpus, writer, settings):
    add_document(corpus, "q3-report", pages=3, chunks=4)
    add_document(corpus, "memo", pages=2, chunks=1, seed=1)
    add_document(corpus, "notes", pages=0, chunks=2, seed=2)
    client = login(writer)
    page = client.get(reverse("corpus:store_documents", args=[corpus.pk])).content.decode()
    assert page.count(">Delete</button>") == 3
    response = client.post(reverse("corpus:store_document_delete", args=[corpus.pk]), {"doc_id": "q3-report"},
                           follow=True)
    assert "Deleted &#x27;q3-report&#x27;: 3 page and 4 chunk embeddings." in response.content.decode()
    visual, text = collection_names(corpus.pk)
    assert collections(settings) == {visual: 2, text: 3}
    assert doc_counts(corpus) == {"memo": (2, 1), "notes": (0, 2)}


def test_deleting_an_unknown_or_blank_document_says_so_and_deletes_nothing(corpus, owner):
    add_document(corpus, "q3-report", pages=1, chunks=1)
    client = login(owner)
    url = reverse("corpus:store_document_delete", args=[corpus.pk])
    unknown = client.post(url, {"doc_id": "q3"}, follow=True).content.decode()
    assert "No document &#x27;q3&#x27; in the store" in unknown
    assert "Name the document" in client.post(url, {"doc_id": "  "}, follow=True).content.decode()
    assert doc_counts(corpus) == {"q3-report": (1, 1)}


def test_a_corpus_never_shows_another_corpus_records(corpus, other, owner):
    add_document(corpus, "team-doc", pages=1, chunks=1)
    add_document(other, "other-doc", pages=2, chunks=3)
    client = login(owner)
    page = client.get(reverse("corpus:store_documents", args=[corpus.pk])).content.decode()
    assert "team-doc" in page and "other-doc" not in page
    detail = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert (
        "<strong>1</strong><span>visual records" in detail
        and "<strong>1</strong><span>text records" in detail
    )
    assert doc_counts(other) == {"other-doc": (2, 3)}


def test_deleting_a_corpus_in_the_portal_drops_its_collections(corpus, other, owner, settings,
                                                              django_capture_on_commit_callbacks):
    add_document(corpus, "team-doc", pages=3, chunks=4)
    add_document(other, "other-doc", pages=2, chunks=1)
    with django_capture_on_commit_callbacks(execute=True):
        response = login(owner).post(reverse("corpus:delete", args=[corpus.pk]))
    assert response.status_code == 302 and not Corpus.objects.filter(pk=corpus.pk).exists()
    other_visual, other_text = collection_names(other.pk)
    assert collections(settings) == {other_visual: 2, other_text: 1}


def test_admin_bulk_delete_drops_every_deleted_corpus_store(corpus, other, owner, staff, settings,
                                                           django_capture_on_commit_callbacks):
    kept = corpus_create(owner=owner, name="Kept", hdc_dimensions=1024)
    for index, each in enumerate((corpus, other, kept)):
        add_document(each, f"doc-{index}", pages=1, chunks=2, seed=index)
    client = login(staff)
    change = client.get(reverse("admin:corpus_corpus_change", args=[kept.pk])).content.decode()
    assert "1 documents: 1 visual records (pages), 2 text records (chunks)" in change
    assert "multi-vector store" not in client.get(reverse("admin:corpus_corpus_add")).content.decode().lower()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:corpus_corpus_changelist"),
                               {"action": "delete_selected", "_selected_action": [corpus.pk, other.pk],
                                "post": "yes"})
    assert response.status_code == 302 and list(Corpus.objects.all()) == [kept]
    kept_visual, kept_text = collection_names(kept.pk)
    assert collections(settings) == {kept_visual: 1, kept_text: 2}


def test_admin_single_delete_drops_the_store(
    corpus, other, staff, settings, django_capture_on_commit_callbacks
):
    add_document(corpus, "team-doc", pages=1, chunks=1)
    add_document(other, "other-doc", pages=2, chunks=1, seed=1)
    with django_capture_on_commit_callbacks(execute=True):
        response = login(staff).post(reverse("admin:corpus_corpus_delete", args=[corpus.pk]), {"post": "yes"})
    assert response.status_code == 302 and not Corpus.objects.filter(pk=corpus.pk).exists()
    other_visual, other_text = collection_names(other.pk)
    assert collections(settings) == {other_visual: 2, other_text: 1}


def test_a_rolled_back_corpus_deletion_keeps_the_store(corpus, settings, django_capture_on_commit_callbacks):
    add_document(corpus, "team-doc", pages=1, chunks=2)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        Corpus.objects.get(pk=corpus.pk).delete()
        raise RuntimeError("the deletion is rolled back")
    assert Corpus.objects.filter(pk=corpus.pk).exists()
    assert doc_counts(corpus) == {"team-doc": (1, 2)}


def test_unreachable_chroma_is_shown_inline(corpus, owner, settings, caplog,
                                            django_capture_on_commit_callbacks):
    add_document(corpus, "q3-report", pages=1, chunks=1)
    settings.CHROMA_URL = f"http://127.0.0.1:{free_port()}"
    client = login(owner)
    detail = client.get(reverse("corpus:detail", args=[corpus.pk]))
    page = detail.content.decode()
    assert detail.status_code == 200 and "Datasets" in page and "Build index" in page
    assert "multi-vector store is unavailable" in page and settings.CHROMA_URL in page
    listing = client.get(reverse("corpus:store_documents", args=[corpus.pk]))
    assert listing.status_code == 503 and settings.CHROMA_URL in listing.content.decode()
    deleted = client.post(reverse("corpus:store_document_delete", args=[corpus.pk]), {"doc_id": "q3-report"},
                          follow=True)
    assert "multi-vector store is unavailable" in deleted.content.decode()
    visual, text = collection_names(corpus.pk)
    with caplog.at_level(logging.ERROR, logger="corpus.services.multivector"), \
            django_capture_on_commit_callbacks(execute=True):
        assert client.post(reverse("corpus:delete", args=[corpus.pk])).status_code == 302
    assert not Corpus.objects.filter(pk=corpus.pk).exists()
    assert visual in caplog.text and text in caplog.text and "orphan" in caplog.text
    settings.CHROMA_URL = ""
    assert collections(settings) == {visual: 1, text: 1}  # still there, as the log says


@pytest.mark.service
def test_store_pages_on_a_chroma_server(corpus, other, owner, settings, chroma_server,
                                        django_capture_on_commit_callbacks):
    settings.CHROMA_URL = chroma_server
    for each in (corpus, other):  # ids repeat across tests on SQLite; the session server does not reset
        drop_store(each.pk)
    add_document(corpus, "q3-report", pages=3, chunks=4)
    add_document(corpus, "memo", pages=1, chunks=1, seed=1)
    add_document(other, "other-doc", pages=2, chunks=2, seed=2)
    client = login(owner)
    detail = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert (
        "<strong>4</strong><span>visual records" in detail
        and "<strong>5</strong><span>text records" in detail
    )
    client.post(reverse("corpus:store_document_delete", args=[corpus.pk]), {"doc_id": "q3-report"})
    assert doc_counts(corpus) == {"memo": (1, 1)}
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("corpus:delete", args=[corpus.pk]))
    remaining = collections(settings)
    assert not set(collection_names(corpus.pk)) & set(remaining)
    other_visual, other_text = collection_names(other.pk)
    assert remaining[other_visual] == 2 and remaining[other_text] == 2
    drop_store(other.pk)
