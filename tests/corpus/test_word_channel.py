"""The exact-word channel in the portal: a build writes its BM25 index of words beside the index
and measures its own fusion rule; searches fuse it under that rule; a build made before the channel
existed, or whose words file is damaged, searches with HDC alone, exactly as before."""

from __future__ import annotations

import logging
from pathlib import Path

from django.test import Client
from django.urls import reverse

from corpus import serving
from corpus.models import IndexBuild
from engine.fusion import CHOSEN_RULES
from engine.lexical import WORDS_FILE, WordIndex
from memory.services import memories_search
from tests.plugins.portal import TEXTS, build_now


def with_rule(build: IndexBuild, rule: str | None) -> None:
    """Set (or, with None, remove as a build made before the channel has none) the word fusion rule."""
    parameters = {k: v for k, v in build.parameters.items() if k != "word_fusion"}
    if rule is not None:
        parameters["word_fusion"] = {"rule": rule, "evidence": {}}
    IndexBuild.objects.filter(pk=build.pk).update(parameters=parameters)


def test_a_build_writes_its_words_and_measures_its_rule(
    corpus, owner, dataset, django_capture_on_commit_callbacks
):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    fusion = build.parameters["word_fusion"]
    assert fusion["rule"] in CHOSEN_RULES
    evidence = fusion["evidence"]
    assert evidence["queries"] > 0 and set(evidence["mrr"]) == set(CHOSEN_RULES)
    assert evidence["mrr"][fusion["rule"]] >= evidence["mrr"]["hdc"]
    assert "portal_words" in build.timings  # the progress went through the "words" phase
    index = WordIndex.for_build(build.build_dir)
    assert index is not None and index.count == len(TEXTS)
    # Row i of the word index is row i of the HDC index: the memory stored with hdv_idx i.
    for memory in build.memories.all():
        scores = index.score_rows(memory.text, range(len(TEXTS)))
        assert int(scores.argmax()) == memory.hdv_idx


def test_searches_fuse_bm25_under_the_builds_rule(corpus, owner, member, outsider, dataset,
                                                 django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    with_rule(build, "z:1")
    results = memories_search(user=member, corpus_ids=[corpus.pk], query="Which organelles produce ATP?")
    assert results[0].memory.text == TEXTS[4]
    assert results[0].late_score > 0 and results[0].fused_score is not None
    assert results[0].late_kind == "bm25"  # what the search page and the API label the score
    assert memories_search(user=outsider, corpus_ids=[corpus.pk], query="Which organelles produce ATP?") == []
    page = Client()
    page.force_login(member)
    html = page.get(reverse("memory:search"), {"q": "Which organelles produce ATP?", "corpora": [corpus.pk]})
    html = html.content.decode()
    assert 'title="BM25 score of the memory' in html and ">BM25 " in html and ">LI " not in html
    with_rule(build, "hdc")  # the evidence's "HDC alone": the word index is not asked
    results = memories_search(user=member, corpus_ids=[corpus.pk], query="Which organelles produce ATP?")
    assert all(r.late_score is None and r.fused_score is None and r.late_kind is None for r in results)


def test_a_build_without_the_channel_searches_as_before(corpus, owner, member, dataset,
                                                       django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    with_rule(build, None)
    (Path(build.build_dir) / WORDS_FILE).unlink()
    results = memories_search(user=member, corpus_ids=[corpus.pk], query=TEXTS[2])
    assert results[0].memory.text == TEXTS[2]
    assert all(r.late_score is None and r.fused_score is None for r in results)


def test_a_damaged_words_file_falls_back_to_hdc_alone_and_says_so(corpus, owner, member, dataset, caplog,
                                                                 django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    with_rule(build, "z:1")
    (Path(build.build_dir) / WORDS_FILE).write_bytes(b"not a zip file")
    serving.forget_build(build.build_dir)
    with caplog.at_level(logging.WARNING, logger="memory.services"):
        results = memories_search(user=member, corpus_ids=[corpus.pk], query=TEXTS[5])
    assert results[0].memory.text == TEXTS[5]
    assert all(r.late_score is None for r in results)
    assert "exact-word scores unavailable, HDC alone" in caplog.text
