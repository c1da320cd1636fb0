"""The meaning channel on by default and read in the background (`corpus.services.meaning_jobs`),
through the real services, the real build and the real sentence encoder (all-MiniLM-L6-v2), on
tiny corpora: a build serves by HDC and words before a single memory is read by meaning; the task,
queued by the build's end on its own queue, then reads the state segment by segment; a search in
between scores the rows read and ranks the rest by HDC and words, and never errors; the task run
again does nothing; a corpus with the setting off queues no task."""

from __future__ import annotations

from pathlib import Path

from django.urls import reverse

from corpus.models import Corpus, IndexBuild
from corpus.services.appends import append_start
from corpus.services.build_runner import build_run
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create
from corpus.services.meaning_jobs import meaning_run, meaning_state
from engine.meaning import MEANING_FILE, MeaningIndex
from memory.services import memories_search
from tests.corpus.test_appends import NEW
from tests.corpus.test_meaning_channel import PARAPHRASE, with_meaning_rule
from tests.plugins.api import token_client
from tests.plugins.portal import SMALL_HDC, TEXTS, login, upload

Meaning = IndexBuild.Meaning


def test_a_new_corpus_reads_by_meaning_unless_told_otherwise(settings, owner):
    settings.MEANING_CHANNEL_DEFAULT = True  # the site's default (the test fixtures turn it off)
    assert corpus_create(owner=owner, name="Plain", **SMALL_HDC).meaning_channel is True
    # Late interaction has no word channel for meaning to follow: a new corpus with it reads none.
    late = corpus_create(owner=owner, name="Late", late_interaction=True, **SMALL_HDC)
    assert late.meaning_channel is False
    assert corpus_create(owner=owner, name="Off", meaning_channel=False, **SMALL_HDC).meaning_channel is False
    assert Corpus._meta.get_field("meaning_channel").default is True  # the model's own (the migration's)
    settings.MEANING_CHANNEL_DEFAULT = False  # the setting turns the default off
    assert corpus_create(owner=owner, name="Site off", **SMALL_HDC).meaning_channel is False


def _run_job(job: IndexBuild, capture) -> tuple[IndexBuild, list]:  # noqa: ANN001 - the capture fixture
    """Run a queued build or append as its task would, keeping what it queues (the meaning task)
    unrun: the callbacks come back."""
    with capture() as queued:
        build_run(build_id=job.pk)
    job.refresh_from_db()
    return job, list(queued)


def _texts(results) -> list[str]:  # noqa: ANN001 - memory.services results
    return [r.memory.text for r in results]


def test_a_build_serves_before_meaning_and_the_task_reads_segment_by_segment(
        corpus, owner, member, outsider, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    Corpus.objects.filter(pk=corpus.pk).update(meaning_channel=True)
    corpus.refresh_from_db()
    upload(corpus, owner)
    with capture():
        queued = build_start(corpus=corpus, user=owner)
    build, _ = _run_job(queued, capture)  # the meaning task it queues is not run yet
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    # Searchable by HDC and words at once: no meaning row read yet, no channel asked.
    assert build.meaning == Meaning.PENDING and MeaningIndex.for_build(build.build_dir) is None
    assert "meaning_fusion" not in build.parameters or build.parameters["meaning_fusion"] is None
    found = memories_search(user=member, corpus_ids=[corpus.pk], query=TEXTS[5])
    assert found[0].memory.text == TEXTS[5] and found[0].meaning_score is None
    # A question in other words: no error, and HDC and words alone do not put its memory first.
    assert _texts(memories_search(user=member, corpus_ids=[corpus.pk], query=PARAPHRASE))[:1] != [TEXTS[6]]
    state = meaning_state(corpus.pk)
    assert (state["segments_read"], state["waiting"], state["done"], state["total"]) == (0, 1, 0, len(TEXTS))
    page = login(owner).get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert "Reading by meaning" in page and f"0 of {len(TEXTS)} memories" in page
    assert 'id="meaning-progress" data-live="1"' in page  # builds.js follows it live
    polled = login(member).get(reverse("corpus:build_status", args=[corpus.pk])).json()["meaning"]
    assert (polled["waiting"], polled["done"], polled["total"]) == (1, 0, len(TEXTS))
    api = token_client(member).get(f"/api/v1/builds/{build.pk}/")
    assert api.status_code == 200 and api.json()["meaning"]["status"] == "pending"
    assert token_client(outsider).get(f"/api/v1/builds/{build.pk}/").status_code == 404

    # An append onto a state not read yet serves at once too, and waits its turn.
    corpus.refresh_from_db()
    upload(corpus, owner, NEW, "new.jsonl")
    with capture():
        queued = append_start(corpus=corpus, user=owner)
    append, _ = _run_job(queued, capture)
    assert append.status == IndexBuild.Status.SUCCEEDED, append.error
    assert append.meaning == Meaning.PENDING and not (Path(append.build_dir) / MEANING_FILE).exists()

    # The base build first: its rows and its rule; the append's rows are not read yet.
    assert meaning_run(corpus_id=corpus.pk, segments=1) == 1
    build.refresh_from_db()
    assert build.meaning == Meaning.DONE and build.meaning_done == len(TEXTS) and build.meaning_seconds > 0
    assert build.parameters["meaning_fusion"]["evidence"]["queries"] > 0
    assert MeaningIndex.for_build(build.build_dir).count == len(TEXTS)
    with_meaning_rule(build, "late")
    between = memories_search(user=member, corpus_ids=[corpus.pk], query=PARAPHRASE)
    assert between[0].memory.text == TEXTS[6] and between[0].meaning_score > 0.3  # the channel contributes
    own_words = memories_search(user=member, corpus_ids=[corpus.pk], query=NEW[0])
    assert own_words[0].memory.text == NEW[0] and own_words[0].meaning_score is None  # by HDC and words
    assert meaning_state(corpus.pk)["segments_read"] == 1

    # Then the append; run again, the task finds nothing to do and changes nothing.
    assert meaning_run(corpus_id=corpus.pk) == 1
    append.refresh_from_db()
    assert append.meaning == Meaning.DONE and MeaningIndex.for_build(append.build_dir).count == len(NEW)
    stamps = [(Path(b.build_dir) / MEANING_FILE).stat().st_mtime_ns for b in (build, append)]
    assert meaning_run(corpus_id=corpus.pk) == 0
    assert stamps == [(Path(b.build_dir) / MEANING_FILE).stat().st_mtime_ns for b in (build, append)]
    pouched = "Which pouched animal lives on an island?"
    found = memories_search(user=member, corpus_ids=[corpus.pk], query=pouched)
    assert found[0].memory.text == NEW[0] and found[0].meaning_score > 0.3
    state = meaning_state(corpus.pk)
    assert (state["segments_read"], state["waiting"], state["done"]) == (2, 0, len(TEXTS) + len(NEW))
    page = login(owner).get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert "Reading by meaning" not in page
    assert memories_search(user=outsider, corpus_ids=[corpus.pk], query=PARAPHRASE) == []


def test_a_corpus_with_the_setting_off_queues_no_meaning_task(corpus, owner,
                                                              django_capture_on_commit_callbacks):
    assert corpus.meaning_channel is False
    upload(corpus, owner)
    with django_capture_on_commit_callbacks():
        queued = build_start(corpus=corpus, user=owner)
    build, callbacks = _run_job(queued, django_capture_on_commit_callbacks)
    for callback in callbacks:  # what the build's end queued, run now (tasks run inline): no meaning task
        callback()
    build.refresh_from_db()
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    assert build.meaning == Meaning.NONE and MeaningIndex.for_build(build.build_dir) is None
    assert meaning_run(corpus_id=corpus.pk) == 0 and meaning_state(corpus.pk)["segments"] == 0
