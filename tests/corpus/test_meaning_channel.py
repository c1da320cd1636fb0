"""The meaning channel in the portal (`engine.meaning`): a corpus that has it has each build read
every memory with the sentence encoder (the real all-MiniLM-L6-v2) after it serves and measure its
own rule (tests/corpus/test_meaning_background.py: the steps in between), and each append onto a
state read by meaning read its own before it serves; searches fuse it under that rule and find a
memory worded unlike the question; the form shows the cost before the owner turns it on; a damaged
file falls back to HDC and words."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from django.urls import reverse

from corpus import serving
from corpus.models import Corpus, IndexBuild
from corpus.services import builds
from corpus.templatetags.portal import seconds
from engine.meaning import MEANING_FILE, MEANING_RULES, MeaningIndex
from memory.services import memories_search
from tests.corpus.test_appends import NEW, page_upload
from tests.plugins.api import token_client
from tests.plugins.portal import TEXTS, build_now, login

# No content word in common with TEXTS[6] ("Volcanoes erupt when magma from the mantle rises ...").
PARAPHRASE = "What happens when molten rock bursts out of a mountain?"


@pytest.fixture
def meaning_corpus(corpus: Corpus) -> Corpus:
    Corpus.objects.filter(pk=corpus.pk).update(meaning_channel=True)
    corpus.refresh_from_db()
    return corpus


def with_meaning_rule(build: IndexBuild, rule: str) -> None:
    IndexBuild.objects.filter(pk=build.pk).update(
        parameters={**build.parameters, "meaning_fusion": {"rule": rule, "evidence": {}}})


def test_a_build_reads_every_memory_by_meaning_and_measures_its_rule(meaning_corpus, owner, dataset,
                                                                     django_capture_on_commit_callbacks):
    build = build_now(meaning_corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    fusion = build.parameters["meaning_fusion"]
    assert build.parameters["meaning_channel"] is True and fusion["rule"] in MEANING_RULES
    assert set(fusion["evidence"]["mrr"]) == set(MEANING_RULES) and fusion["evidence"]["queries"] > 0
    # Read after the build served, by the task its end queued (run inline here).
    assert build.meaning == IndexBuild.Meaning.DONE and build.meaning_done == len(TEXTS) > 0
    assert build.meaning_seconds > 0 and "portal_meaning" not in build.timings
    index = MeaningIndex.for_build(build.build_dir)
    assert index is not None and index.count == len(TEXTS)
    page = login(owner).get(reverse("corpus:detail", args=[meaning_corpus.pk])).content.decode()
    assert "with the meaning channel" in page and "read by meaning too" in page
    # Row i of the meaning rows is row i of the HDC index: the memory stored with hdv_idx i.
    channel = serving.state_meaning(serving.loaded_build(build.build_dir))
    for memory in build.memories.all():
        assert int(channel.query(memory.text).scores(np.arange(channel.count)).argmax()) == memory.hdv_idx


def test_searches_find_a_paraphrase_by_meaning_and_outsiders_find_nothing(
        meaning_corpus, owner, member, outsider, dataset, django_capture_on_commit_callbacks):
    build = build_now(meaning_corpus, owner, django_capture_on_commit_callbacks)
    with_meaning_rule(build, "hdc")  # the first stage alone: the channel is not asked
    before = [
        r.memory.text for r in memories_search(user=member, corpus_ids=[meaning_corpus.pk], query=PARAPHRASE)
    ]
    with_meaning_rule(build, "late")
    results = memories_search(user=member, corpus_ids=[meaning_corpus.pk], query=PARAPHRASE)
    assert results[0].memory.text == TEXTS[6] and results[0].fused_score is not None
    assert results[0].meaning_score == max(r.meaning_score for r in results) > 0.3
    assert before[:1] != [TEXTS[6]]  # HDC and words alone did not put it first
    assert memories_search(user=outsider, corpus_ids=[meaning_corpus.pk], query=PARAPHRASE) == []
    page = login(member).get(reverse("memory:search"), {"q": PARAPHRASE, "corpora": [meaning_corpus.pk]})
    html = page.content.decode()
    assert "Volcanoes erupt" in html and "HDC, exact words and meaning" in html and ">meaning 0." in html
    api = token_client(member).get(f"/api/v1/corpora/{meaning_corpus.pk}/search/", {"q": PARAPHRASE}).json()
    assert api["results"][0]["text"] == TEXTS[6] and api["results"][0]["meaning_score"] > 0.3
    assert token_client(outsider).get(f"/api/v1/corpora/{meaning_corpus.pk}/search/",
                                      {"q": PARAPHRASE}).status_code == 404


def test_an_append_writes_its_segments_rows_and_the_state_searches_them(
        settings, meaning_corpus, owner, member, django_capture_on_commit_callbacks):
    settings.INDEX_ON_UPLOAD = True
    client = login(owner)
    page_upload(client, meaning_corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    page_upload(client, meaning_corpus, NEW, "new.jsonl", django_capture_on_commit_callbacks)
    append = IndexBuild.objects.get(corpus=meaning_corpus, kind=IndexBuild.Kind.APPEND)
    assert append.status == IndexBuild.Status.SUCCEEDED, append.error
    assert append.parameters["meaning_channel"] is True and "portal_meaning" in append.timings
    assert MeaningIndex.for_build(append.build_dir).count == len(NEW)
    with_meaning_rule(meaning_corpus.active_build, "late")
    found = memories_search(user=member, corpus_ids=[meaning_corpus.pk],
                            query="Which pouched animal lives on an island near Perth?")
    assert found[0].memory.text == NEW[0]


def test_a_damaged_meaning_file_falls_back_to_hdc_and_words_and_says_so(
        meaning_corpus, owner, member, dataset, caplog, django_capture_on_commit_callbacks):
    build = build_now(meaning_corpus, owner, django_capture_on_commit_callbacks)
    with_meaning_rule(build, "late")
    (Path(build.build_dir) / MEANING_FILE).write_bytes(b"not a zip file")
    serving.forget_build(build.build_dir)
    with caplog.at_level(logging.WARNING, logger="memory.services"):
        results = memories_search(user=member, corpus_ids=[meaning_corpus.pk], query=TEXTS[5])
    assert results[0].memory.text == TEXTS[5]
    assert "meaning scores unavailable, HDC and words" in caplog.text


def test_the_form_shows_the_cost_before_the_owner_turns_it_on(monkeypatch, corpus, owner, dataset,
                                                             django_capture_on_commit_callbacks):
    monkeypatch.setattr(
        builds, "MEANING_RATE_MIN_MEMORIES", len(TEXTS)
    )  # the rate of an 8-memory build counts
    client = login(owner)
    page = client.get(reverse("corpus:edit", args=[corpus.pk])).content.decode()
    estimate = f"About {seconds(1000 / builds.MEANING_RATE_ESTIMATE)} of reading in the background per 1,000"
    assert "Meaning channel" in page and estimate in page
    assert "estimated for two cores" in page
    Corpus.objects.filter(pk=corpus.pk).update(meaning_channel=True)
    corpus.refresh_from_db()
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    page = client.get(reverse("corpus:edit", args=[corpus.pk])).content.decode()
    assert f"For this corpus&#x27;s {len(TEXTS)} memories" in page
    assert "as measured by the last segment read here" in page
    form = {"name": corpus.name, "visibility": corpus.visibility, "hdc_dimensions": corpus.hdc_dimensions,
            "hdc_seed": corpus.hdc_seed, "hdc_ngram": corpus.hdc_ngram, "chunk_size": corpus.chunk_size,
            "meaning_channel": "on", "late_interaction": "on"}
    refused = client.post(reverse("corpus:edit", args=[corpus.pk]), form)
    assert refused.status_code == 200 and "choose one of the two" in refused.content.decode()
    corpus.refresh_from_db()
    assert not corpus.late_interaction  # nothing saved


def test_the_progress_bar_gives_the_encoder_most_of_an_append_that_reads_by_meaning():
    plain = IndexBuild(kind="append", phase="words", done=1, total=1, parameters={})
    words = IndexBuild(kind="append", phase="words", done=1, total=1, parameters={"meaning_channel": True})
    meaning = {"meaning_channel": True}
    half = IndexBuild(kind="append", phase="meaning", done=50, total=100, parameters=meaning)
    # A full build serves before it is read by meaning: its bar has no meaning phase.
    build = IndexBuild(kind="build", phase="words", done=1, total=1, parameters={"meaning_channel": True})
    assert plain.percent > 80 and words.percent < 10 < half.percent < 60 and build.percent > 80
