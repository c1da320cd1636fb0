"""Late interaction in the portal: builds fill the corpus's text collection (real Gemma model,
embedded Chroma in the test's DATA_DIR) and keep the token vectors beside the build, searches fuse
their exact MaxSim with HDC (without asking Chroma), dataset deletion removes the records, and an
unreachable Chroma (a closed port) fails a build."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from core import runtime
from corpus.chroma import store_for
from corpus.models import Corpus, IndexBuild, Memory
from corpus.services import build_phases
from corpus.services.builds import build_cancel
from corpus.services.corpora import dataset_delete
from engine.fusion import CHOSEN_RULES
from engine.llama_server import free_port
from engine.text_store import LATE_FILE
from memory.services import memories_search
from tests.plugins.portal import TEXTS, build_now, upload

Status = IndexBuild.Status
MORE = ["Tides follow the moon because its gravity pulls on the oceans twice a day.",
        "Glaciers carve U-shaped valleys as the ice grinds slowly over the bedrock."]


@pytest.fixture
def late_corpus(corpus) -> Corpus:
    Corpus.objects.filter(pk=corpus.pk).update(late_interaction=True)
    corpus.refresh_from_db()
    return corpus


def text_records(corpus_id: int) -> list[dict]:
    """Every text record's metadata in the corpus's store."""
    return store_for(corpus_id).chroma_collection("text").get(include=["metadatas"])["metadatas"]


def closed_chroma_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def fuse_equally(build: IndexBuild) -> None:
    """Give a build a fusing rule. Its own evidence, from this six-text corpus, may well pick HDC
    alone; tests about late scores need the late scorer asked."""
    IndexBuild.objects.filter(pk=build.pk).update(
        parameters={**build.parameters, "fusion": {"rule": "z:1", "evidence": {}}})


def test_build_measures_its_fusion_rule_and_rule_hdc_leaves_late_scores_out(
        late_corpus, owner, member, dataset, django_capture_on_commit_callbacks):
    build = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    fusion = build.parameters["fusion"]
    assert fusion["rule"] in CHOSEN_RULES
    evidence = fusion["evidence"]
    assert evidence["queries"] > 0 and set(evidence["mrr"]) == set(CHOSEN_RULES)
    assert set(evidence["mrr_by_kind"]) <= {"lead", "span", "heldout"}
    # The chosen rule ranks the self-queries at least as well as HDC alone.
    assert evidence["mrr"][fusion["rule"]] >= evidence["mrr"]["hdc"]
    assert (Path(build.build_dir) / LATE_FILE).is_file()
    IndexBuild.objects.filter(pk=build.pk).update(
        parameters={**build.parameters, "fusion": {"rule": "hdc", "evidence": {}}})
    results = memories_search(user=member, corpus_ids=[late_corpus.pk], query=TEXTS[3])
    assert results[0].memory.text == TEXTS[3]
    assert all(r.late_score is None and r.fused_score is None for r in results)


def test_build_fills_one_text_record_per_memory(
    late_corpus, owner, dataset, django_capture_on_commit_callbacks
):
    build = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    assert late_corpus.active_build_id == build.pk
    assert build.parameters["late_interaction"] is True
    assert build.parameters["text_records"] == len(TEXTS) and build.parameters["text_rows_skipped"] == 0
    assert "portal_text_store" in build.timings  # the progress went through the "text_store" phase
    records = text_records(late_corpus.pk)
    assert store_for(late_corpus.pk).chroma_collection("text").count() == len(TEXTS)
    assert {r["index_build"] for r in records} == {str(build.pk)}
    assert sorted(r["row"] for r in records) == list(range(len(TEXTS)))
    assert {r["source_id"] for r in records} == {dataset.pk}
    texts = dict(Memory.objects.filter(build=build).values_list("hdv_idx", "text"))
    assert all(r["text_preview"] == texts[r["row"]][:200] for r in records)


def test_build_without_late_interaction_leaves_the_store_alone(corpus, owner, dataset,
                                                               django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    assert build.parameters["late_interaction"] is False and "text_records" not in build.parameters
    assert "portal_text_store" not in build.timings
    assert text_records(corpus.pk) == []


def test_second_build_replaces_the_first_records_after_it_is_active(
        late_corpus, owner, member, dataset, django_capture_on_commit_callbacks, monkeypatch):
    first = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert first.status == Status.SUCCEEDED, first.error
    fuse_equally(first)
    upload(late_corpus, owner, MORE, "more.jsonl")
    seen = {}
    real_fill = build_phases.text_store_fill

    def observed_fill(**kwargs):  # noqa: ANN003, ANN202 - a spy: the real fill runs, then we look around
        result = real_fill(**kwargs)
        seen["active"] = Corpus.objects.get(pk=late_corpus.pk).active_build_id
        seen["builds"] = {r["index_build"] for r in text_records(late_corpus.pk)}
        seen["results"] = memories_search(user=member, corpus_ids=[late_corpus.pk], query=TEXTS[3])
        return result

    monkeypatch.setattr(build_phases, "text_store_fill", observed_fill)
    second = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == Status.SUCCEEDED, second.error
    # Filled but not yet active: the first build served, with its own records, beside the new ones.
    assert seen["active"] == first.pk
    assert seen["builds"] == {str(first.pk), str(second.pk)}
    assert seen["results"][0].memory.text == TEXTS[3] and seen["results"][0].late_score is not None
    assert late_corpus.active_build_id == second.pk
    records = text_records(late_corpus.pk)
    assert {r["index_build"] for r in records} == {str(second.pk)}
    assert len(records) == len(TEXTS) + len(MORE) == second.parameters["text_records"]


def test_chroma_unreachable_during_the_fill_fails_the_build(late_corpus, owner, dataset, settings,
                                                             django_capture_on_commit_callbacks):
    first = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert first.status == Status.SUCCEEDED, first.error
    settings.CHROMA_URL = url = closed_chroma_url()
    second = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == Status.FAILED
    assert url in second.error and "ChromaDBConnectionError" in second.error
    assert late_corpus.active_build_id == first.pk
    assert not Memory.objects.filter(build=second).exists()
    assert not Path(second.build_dir).exists() and Path(first.build_dir).is_dir()
    settings.CHROMA_URL = ""
    assert {r["index_build"] for r in text_records(late_corpus.pk)} == {str(first.pk)}


def test_build_cancelled_after_its_fill_leaves_no_records(late_corpus, owner, dataset, monkeypatch,
                                                          django_capture_on_commit_callbacks):
    first = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    real_fill = build_phases.text_store_fill

    def fill_then_cancel(**kwargs):  # noqa: ANN003, ANN202 - the real fill, then the user cancels
        result = real_fill(**kwargs)
        assert {r["index_build"] for r in text_records(late_corpus.pk)} == {
            str(first.pk),
            str(kwargs["build_id"]),
        }
        build_cancel(build=IndexBuild.objects.get(pk=kwargs["build_id"]))
        return result

    monkeypatch.setattr(build_phases, "text_store_fill", fill_then_cancel)
    second = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == Status.CANCELLED
    assert late_corpus.active_build_id == first.pk
    assert {r["index_build"] for r in text_records(late_corpus.pk)} == {str(first.pk)}


def test_search_fuses_late_interaction_and_hides_it_from_outsiders(
        late_corpus, owner, member, outsider, dataset, django_capture_on_commit_callbacks):
    fuse_equally(build_now(late_corpus, owner, django_capture_on_commit_callbacks))
    results = memories_search(user=member, corpus_ids=[late_corpus.pk], query=TEXTS[3])
    assert results and results[0].memory.text == TEXTS[3]
    own = results[0]
    assert own.late_score is not None and own.late_score > 0 and own.fused_score is not None
    assert own.hdc_score > 0 and own.corpus_id == late_corpus.pk
    assert memories_search(user=outsider, corpus_ids=[late_corpus.pk], query=TEXTS[3]) == []
    page = Client()
    page.force_login(member)
    html = page.get(reverse("memory:search"), {"q": TEXTS[3], "corpora": [late_corpus.pk]}).content.decode()
    assert html.count('title="Late-interaction (MaxSim) score') >= 1 and '>LI ' in html
    dataset.enabled = False
    dataset.save()
    assert memories_search(user=owner, corpus_ids=[late_corpus.pk], query=TEXTS[3]) == []


def test_search_needs_no_chroma_and_a_build_without_kept_vectors_uses_hdc_alone(
        late_corpus, owner, dataset, settings, django_capture_on_commit_callbacks):
    build = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    fuse_equally(build)
    settings.CHROMA_URL = closed_chroma_url()  # searches read the build's own vectors
    results = memories_search(user=owner, corpus_ids=[late_corpus.pk], query=TEXTS[3])
    assert results[0].memory.text == TEXTS[3] and results[0].late_score is not None
    assert results[0].late_kind == "maxsim"
    runtime.reset()
    (Path(build.build_dir) / LATE_FILE).unlink()  # as a build filled before the vectors were kept
    results = memories_search(user=owner, corpus_ids=[late_corpus.pk], query=TEXTS[3])
    assert results and results[0].memory.text == TEXTS[3]
    assert all(result.late_score is None for result in results)


def test_dataset_delete_removes_its_text_records(
    late_corpus, owner, dataset, django_capture_on_commit_callbacks
):
    more = upload(late_corpus, owner, MORE, "more.jsonl")
    build = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    assert {r["source_id"] for r in text_records(late_corpus.pk)} == {dataset.pk, more.pk}
    with django_capture_on_commit_callbacks(execute=True):
        dataset_delete(dataset=more)
    records = text_records(late_corpus.pk)
    assert {r["source_id"] for r in records} == {dataset.pk} and len(records) == len(TEXTS)
    results = memories_search(user=owner, corpus_ids=[late_corpus.pk], query=MORE[0])
    assert MORE[0] not in [result.memory.text for result in results]

def test_owner_turns_late_interaction_on_in_the_settings(corpus, owner, outsider, client_for):
    form = {
        "name": corpus.name,
        "description": "",
        "visibility": corpus.visibility,
        "hdc_dimensions": corpus.hdc_dimensions,
        "hdc_seed": corpus.hdc_seed,
        "hdc_ngram": corpus.hdc_ngram,
        "chunk_size": corpus.chunk_size,
        "late_interaction": "on",
    }
    edit = reverse("corpus:edit", args=[corpus.pk])
    assert client_for(outsider).post(edit, form).status_code == 404
    corpus.refresh_from_db()
    assert corpus.late_interaction is False
    assert "HDC only" in client_for(owner).get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    response = client_for(owner).post(edit, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    corpus.refresh_from_db()
    assert corpus.late_interaction is True
    assert "HDC fused with late interaction" in client_for(owner).get(
        reverse("corpus:detail", args=[corpus.pk])).content.decode()
