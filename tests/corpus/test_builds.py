"""Index builds through the services and the (inline) Celery task, on the real Gemma model."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from api.serializers import MemoryResultSerializer
from chat.serializers import memory_result_json
from core.errors import ApplicationError
from corpus.files import build_dir
from corpus.models import Corpus, IndexBuild, Memory
from corpus.services.build_liveness import builds_sweep_stale
from corpus.services.build_runner import build_run
from corpus.services.builds import BuildAlreadyActive, build_cancel, build_start, builds_cleanup
from corpus.services.corpora import corpus_create
from corpus.tasks import run_build
from engine.loaded_build import load_corpus
from memory.services import MemoryResult, memories_search
from tests.plugins.portal import SMALL_HDC, TEXTS, build_now, login, upload

Status = IndexBuild.Status


def test_build_succeeds_activates_and_inserts_memories(
    corpus, owner, dataset, django_capture_on_commit_callbacks
):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    assert corpus.active_build_id == build.pk
    assert build.documents == len(TEXTS) and build.phase == "done" and build.percent == 100
    assert build.parameters["hdc_dimensions"] == 1024 and Path(build.parameters["gguf_path"]).is_file()
    memories = list(Memory.objects.filter(build=build).order_by("hdv_idx"))
    assert [m.hdv_idx for m in memories] == list(range(len(TEXTS)))
    assert [m.text for m in memories] == TEXTS
    assert all(
        m.dataset_id == dataset.pk and m.corpus_id == corpus.pk and m.token_count > 5 for m in memories
    )
    loaded = load_corpus(build.build_dir)
    assert loaded.count == len(TEXTS) and loaded.dims == 1024
    assert list(loaded.index.token_counts) == [m.token_count for m in memories]
    dataset.refresh_from_db()
    assert dataset.record_count == len(TEXTS) and dataset.record_count_exact
    assert {"tokenize", "encode", "verify", "memory_insert"} <= set(build.timings)
    # The stats page's phases add up to the whole build (the switch and the word index included).
    from memory.stats import build_phase_seconds

    total = (build.finished - build.started).total_seconds()
    phases = build_phase_seconds(build.timings, total)
    assert {"tokenize", "encode", "words", "activation"} <= set(phases)
    assert abs(sum(phases.values()) - total) <= max(0.05, 0.02 * total), (phases, total)


def test_builds_are_numbered_per_corpus(corpus, owner, dataset, django_capture_on_commit_callbacks):
    other = corpus_create(owner=owner, name="Other notes", **SMALL_HDC)
    upload(other, owner, ["Lighthouses guide ships along the rocky coast at night."], name="other.jsonl")
    first = build_now(corpus, owner, django_capture_on_commit_callbacks)
    second = build_now(corpus, owner, django_capture_on_commit_callbacks)
    elsewhere = build_now(other, owner, django_capture_on_commit_callbacks)
    assert (first.number, second.number, elsewhere.number) == (1, 2, 1)
    page = login(owner).get(reverse("corpus:detail", args=[other.pk])).content.decode()
    assert "Serving build #1" in page and f"#{elsewhere.pk}" not in page.split("Serving build")[1][:20]


def test_one_bar_for_the_whole_build_never_goes_back():
    build = IndexBuild(status=Status.RUNNING)
    seen = []
    for phase, done, total in [
        ("starting", 0, 0),
        ("tokenizer", 0, 1),
        ("tokenize", 50, 100),
        ("tokenize", 100, 100),
        ("embeddings", 0, 1),
        ("embeddings", 1, 1),
        ("vocabulary", 0, 10),
        ("vocabulary", 10, 10),
        ("encode", 0, 100),
        ("encode", 60, 100),
        ("encode", 100, 100),
        ("verify", 100, 100),
        ("activate", 0, 1),
        ("words", 0, 1),
    ]:
        build.phase, build.done, build.total = phase, done, total
        seen.append(build.percent)
    assert seen == sorted(seen) and seen[0] <= 1 and 80 <= seen[-1] < 100, seen
    build.status = Status.SUCCEEDED
    assert build.percent == 100


def test_search_returns_the_matching_memory_and_respects_enabled_datasets(
        corpus, owner, member, outsider, dataset, django_capture_on_commit_callbacks):
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    results = memories_search(user=member, corpus_ids=[corpus.pk], query="storming of the Bastille in Paris")
    assert results and results[0].memory.text == TEXTS[3]
    assert results[0].corpus_id == corpus.pk and results[0].dataset_name == dataset.name
    assert results[0].hdc_score > 0
    assert memories_search(user=outsider, corpus_ids=[corpus.pk], query="storming of the Bastille") == []
    # Rows the caller has loaded (what the API's search view passes) are searched under the same rule.
    loaded = Corpus.objects.select_related("active_build").get(pk=corpus.pk)
    assert (
        memories_search(user=member, corpora=[loaded], query="storming of the Bastille in Paris") == results
    )
    assert memories_search(user=outsider, corpora=[loaded], query="storming of the Bastille") == []
    dataset.enabled = False
    dataset.save()
    assert memories_search(user=owner, corpus_ids=[corpus.pk], query="storming of the Bastille") == []


def test_a_search_result_says_its_corpus_by_id_and_by_name_and_each_shape_keeps_them_apart(
        corpus, owner, member, dataset, django_capture_on_commit_callbacks):
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    best = memories_search(user=member, corpus_ids=[corpus.pk], query="storming of the Bastille in Paris")[0]
    assert type(best) is MemoryResult and best.memory.text == TEXTS[3]
    assert (best.corpus_id, best.corpus_name, best.dataset_id, best.dataset_name) == \
        (corpus.pk, "Team notes", dataset.pk, dataset.name)
    assert best.memory_id == Memory.objects.get(build=corpus.active_build_id, hdv_idx=3).pk
    # The API names both by id, with their names beside them; the chat shows the corpus's name.
    api = MemoryResultSerializer(best).data
    assert (api["corpus"], api["corpus_name"], api["dataset"], api["dataset_name"]) == \
        (corpus.pk, "Team notes", dataset.pk, dataset.name)
    assert (api["id"], api["score"], api["text"]) == (best.memory_id, best.hdc_score, TEXTS[3])
    # One name each for the row (`id`) and the content hash (`key`), as the memory's own page has them.
    assert api["key"] == best.memory.content_hash == Memory.objects.get(pk=best.memory_id).content_hash
    chat = memory_result_json(best, rank=0)
    assert (chat["corpus"], chat["source"], chat["memory_id"]) == ("Team notes", dataset.name, best.memory_id)


def test_failed_build_keeps_previous_build_active(corpus, owner, dataset, django_capture_on_commit_callbacks):
    first = build_now(corpus, owner, django_capture_on_commit_callbacks)
    upload(
        corpus,
        owner,
        ["A second dataset about tides and the moon's gravity pulling the oceans."],
        "more.jsonl",
    )
    Path(dataset.file.path).unlink()
    second = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == Status.FAILED
    assert "notes.jsonl" in second.error and "missing" in second.error
    assert corpus.active_build_id == first.pk
    assert not build_dir(corpus.pk, second.pk).exists()
    assert not Memory.objects.filter(build=second).exists()
    assert Memory.objects.filter(build=first).count() == len(TEXTS)
    results = memories_search(user=owner, corpus_ids=[corpus.pk], query="binary search interval comparison")
    assert results[0].memory.text == TEXTS[2]


def test_corrupt_model_fails_with_error_on_row(
    corpus, owner, dataset, tmp_path, django_capture_on_commit_callbacks
):
    bad_model = tmp_path / "broken.gguf"
    bad_model.write_bytes(b"GGUF" + b"\x00" * 64)
    Corpus.objects.filter(pk=corpus.pk).update(gguf_path=str(bad_model))
    corpus.refresh_from_db()
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.FAILED and "broken.gguf" in build.error
    assert corpus.active_build_id is None and not build_dir(corpus.pk, build.pk).exists()


def test_redelivered_task_is_a_no_op(corpus, owner, dataset, django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    finished = build.finished
    assert run_build.delay(build.pk).get() == "not-claimed"
    assert build_run(build_id=build.pk) is None
    build.refresh_from_db()
    assert build.status == Status.SUCCEEDED and build.finished == finished
    assert Memory.objects.filter(build=build).count() == len(TEXTS)


def test_second_concurrent_build_is_refused(corpus, owner, dataset):
    with transaction.atomic():
        first = build_start(corpus=corpus, user=owner)  # queued; its task waits for the commit
    with pytest.raises(BuildAlreadyActive, match="already queued or running"):
        build_start(corpus=corpus, user=owner)
    # The database refuses it too, whatever the service does.
    with pytest.raises(IntegrityError), transaction.atomic():
        IndexBuild.objects.create(corpus=corpus, status=Status.RUNNING)
    assert list(corpus.builds.values_list("pk", flat=True)) == [first.pk]


def test_cancel_queued_build_then_task_does_nothing(corpus, owner, dataset):
    build = build_start(corpus=corpus, user=owner)
    build_cancel(build=build)
    assert build.status == Status.CANCELLED
    assert build_run(build_id=build.pk) is None
    with pytest.raises(ApplicationError, match="only queued or running"):
        build_cancel(build=build)


def test_cancel_flag_stops_running_build_and_keeps_previous(
    corpus, owner, dataset, django_capture_on_commit_callbacks
):
    first = build_now(corpus, owner, django_capture_on_commit_callbacks)
    second = IndexBuild.objects.create(corpus=corpus, created_by=owner, cancel_requested=True)
    result = build_run(build_id=second.pk)
    assert result.status == Status.CANCELLED and result.finished is not None
    corpus.refresh_from_db()
    assert corpus.active_build_id == first.pk
    assert not build_dir(corpus.pk, second.pk).exists() and not Memory.objects.filter(build=second).exists()


def test_stale_running_build_is_swept_and_frees_the_corpus(corpus, owner, dataset, settings):
    old = timezone.now() - timedelta(seconds=settings.BUILD_STALE_SECONDS + 5)
    stale = IndexBuild.objects.create(corpus=corpus, status=Status.RUNNING, started=old, heartbeat=old)
    fresh_dir = build_dir(corpus.pk, stale.pk)
    fresh_dir.mkdir(parents=True)
    alive = IndexBuild.objects.create(corpus=upload_other_corpus(owner), status=Status.RUNNING,
                                      started=timezone.now(), heartbeat=timezone.now())
    assert builds_sweep_stale() == [stale.pk]
    stale.refresh_from_db()
    alive.refresh_from_db()
    assert stale.status == Status.FAILED and "stopped responding" in stale.error
    assert alive.status == Status.RUNNING and not fresh_dir.exists()
    assert build_start(corpus=corpus, user=owner).status == Status.QUEUED


def upload_other_corpus(owner) -> Corpus:  # noqa: ANN001
    from corpus.services.corpora import corpus_create

    return corpus_create(owner=owner, name="Other", hdc_dimensions=1024)


def test_cleanup_deletes_old_builds_but_never_the_active_one(
    corpus, owner, dataset, django_capture_on_commit_callbacks
):
    builds = [build_now(corpus, owner, django_capture_on_commit_callbacks) for _ in range(3)]
    assert corpus.active_build_id == builds[-1].pk
    assert builds_cleanup(keep=1) == [builds[1].pk, builds[0].pk]
    assert not Path(builds[0].build_dir).exists() and Path(builds[2].build_dir).exists()
    assert not Memory.objects.filter(build_id__in=[builds[0].pk, builds[1].pk]).exists()
    Corpus.objects.filter(pk=corpus.pk).update(active_build=None)
    shutil.rmtree(builds[2].build_dir)
    call_command("builds_cleanup", "--keep", "0")
    assert not IndexBuild.objects.filter(corpus=corpus).exists()


def test_nul_characters_survive_the_memory_insert(corpus, owner, django_capture_on_commit_callbacks):
    texts = ["A record with a NUL \u0000 inside its text, about lighthouses and ships.", *TEXTS[:3]]
    upload(corpus, owner, texts, "nul.jsonl")
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    stored = Memory.objects.get(build=build, hdv_idx=0)
    assert stored.text == texts[0].replace("\x00", "\ufffd")


@pytest.mark.slow
def test_an_embedding_model_the_engine_cannot_tokenize_is_refused_by_the_settings_page(staff, gemma_gguf):
    """The chat model (byte-level BPE) is a fine LLM but cannot build an index: the settings page
    says so at once (the service's check, which the API shares) instead of a build failing later."""
    from engine.model_files import default_chat_gguf_path

    client = login(staff)
    values = {
        "name": "Notes",
        "visibility": "private",
        "hdc_dimensions": 1024,
        "hdc_seed": 42,
        "hdc_ngram": 3,
        "chunk_size": 256,
    }
    refused = client.post(reverse("corpus:new"), {**values, "gguf_path": str(default_chat_gguf_path())})
    page = refused.content.decode()
    assert refused.status_code == 200 and "SentencePiece" in page and "&#x27;gpt2&#x27;" in page
    assert not Corpus.objects.filter(name="Notes").exists()
    accepted = client.post(reverse("corpus:new"), {**values, "gguf_path": str(gemma_gguf)})
    assert accepted.status_code == 302 and Corpus.objects.get(name="Notes").gguf_path == str(gemma_gguf)


def test_the_build_task_is_registered_in_every_process_that_loads_the_apps():
    """Services queue the build task by name; a web process (or an eager bench) that never
    imported corpus.tasks itself must still find it, or an eager run would silently go to a broker."""
    import subprocess
    import sys

    code = ("import django; django.setup(); from hdrag_site.celery import app; "
            "from corpus.services.builds import RUN_BUILD_TASK; print(RUN_BUILD_TASK in app.tasks)")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings"})
    assert shown.stdout.strip().splitlines()[-1] == "True", shown.stderr[-2000:]


def test_a_long_record_becomes_memories_a_chat_budget_can_hold(
    corpus, owner, django_capture_on_commit_callbacks
):
    # A JSONL record longer than one chunk is cut like text: each part is a memory of at most a
    # chunk (so a 512-token chat budget can prime it), found by a search, and named on its page.
    import pydoc_data.topics

    long_text = pydoc_data.topics.topics["for"] + "\n\n" + pydoc_data.topics.topics["try"]
    Corpus.objects.filter(pk=corpus.pk).update(chunk_size=128)
    corpus.refresh_from_db()
    upload(corpus, owner, TEXTS + [long_text])
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    parts = list(build.memories.filter(metadata__record=len(TEXTS) + 1).order_by("hdv_idx"))
    assert len(parts) > 3
    assert [m.metadata["part"] for m in parts] == list(range(len(parts)))
    assert all(
        m.token_count <= 128 + 2 and m.text == long_text[m.metadata["char_start"] : m.metadata["char_end"]]
        for m in parts
    )
    assert build.memories.filter(metadata__record=1).get().text == TEXTS[0]  # short records stay whole
    results = memories_search(user=owner, corpus_ids=[corpus.pk], query="What does the finally clause do?",
                              token_budget=512)
    assert any(r.memory.memory_id in {m.pk for m in parts[1:]} for r in results)
    page = login(owner).get(reverse("memory:detail", args=[parts[1].pk])).content.decode()
    assert f"record {len(TEXTS) + 1}, part 2" in page
