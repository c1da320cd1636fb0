"""The process's runtime: deleted builds are let go, Chroma is one bounded connection that never
creates collections on a page view, and orphan collections can be listed and dropped."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from chat.llm import clients
from core import runtime
from core.cache import BoundedCache, array_bytes
from corpus import serving
from corpus.chroma import collection_names, store_for, stored_corpus_ids
from corpus.models import Corpus
from corpus.services.corpora import corpus_create
from engine.multivector.client import connect_chroma
from engine.multivector.errors import ChromaDBConnectionError
from memory.services import memories_search
from tests.plugins.portal import SMALL_HDC, build_now, login, upload


@pytest.fixture(autouse=True)
def fresh_runtime():
    runtime.reset()
    yield
    runtime.reset()


def _mapped(directory: str) -> list[str]:
    """Lines of this process's memory map naming files under `directory` (deleted ones too)."""
    return [line for line in Path("/proc/self/maps").read_text().splitlines() if directory in line]


def test_a_build_deleted_by_another_process_is_unmapped_and_its_disk_space_freed(
        corpus, owner, dataset, django_capture_on_commit_callbacks):
    old = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert memories_search(user=owner, corpus_ids=[corpus.pk], query="binary search interval")
    assert _mapped(old.build_dir), "searching maps the build's index files"
    other = corpus_create(owner=owner, name="Other", **SMALL_HDC)
    upload(other, owner)
    build_now(other, owner, django_capture_on_commit_callbacks)
    # The worker (another process) deletes the build: its files go, this process is not told.
    shutil.rmtree(old.build_dir)
    assert _mapped(old.build_dir), "still mapped: the disk space is held"
    # The next search, of any corpus, lets go of it.
    memories_search(user=owner, corpus_ids=[other.pk], query="binary search interval")
    assert _mapped(old.build_dir) == []
    assert str(Path(old.build_dir).resolve()) not in serving.loaded_build_dirs()


def test_a_search_waits_while_every_search_slot_is_taken(
        corpus, owner, dataset, settings, django_capture_on_commit_callbacks):
    settings.SEARCH_CONCURRENCY = 1
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    taken, released = threading.Event(), []

    def hold_the_slot() -> None:
        with serving.search_slot():
            taken.set()
            time.sleep(0.5)
            released.append(time.monotonic())

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    assert taken.wait(10)
    results = memories_search(user=owner, corpus_ids=[corpus.pk], query="binary search interval")
    finished = time.monotonic()
    holder.join()
    assert results, "the search ran once the slot was free"
    assert released and finished >= released[0], "the search finished only after the slot was given back"


def test_loaded_builds_are_bounded(corpus, owner, dataset, django_capture_on_commit_callbacks, monkeypatch):
    monkeypatch.setattr(serving._builds, "size", 1)
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    other = corpus_create(owner=owner, name="Other", **SMALL_HDC)
    upload(other, owner)
    build_now(other, owner, django_capture_on_commit_callbacks)
    for corpus_id in (corpus.pk, other.pk):
        memories_search(user=owner, corpus_ids=[corpus_id], query="binary search interval")
    other.refresh_from_db()
    assert serving.loaded_build_dirs() == [str(Path(other.active_build.build_dir).resolve())]


def test_every_store_shares_one_chroma_connection(corpus, owner):
    other = corpus_create(owner=owner, name="Other")
    first, second = store_for(corpus.pk), store_for(other.pk)
    assert first._client is second._client is serving.chroma_client()


def test_a_page_view_creates_no_collections(corpus, owner):
    page = login(owner).get(reverse("corpus:detail", args=[corpus.pk]))
    assert page.status_code == 200
    store_page = login(owner).get(reverse("corpus:store_documents", args=[corpus.pk]))
    assert store_page.status_code == 200
    assert stored_corpus_ids() == {}


def test_orphan_collections_are_listed_and_dropped(corpus, owner, capsys):
    store_for(corpus.pk)  # a live corpus's store: never an orphan
    gone = corpus_create(owner=owner, name="Gone")
    store_for(gone.pk)
    gone_id = gone.pk
    Corpus.objects.filter(pk=gone_id).delete()  # a queryset delete: no signal drops its store
    call_command("chroma_orphans")
    listed = capsys.readouterr().out
    assert f"corpus {gone_id}:" in listed and f"corpus {corpus.pk}:" not in listed
    assert set(stored_corpus_ids()) == {corpus.pk, gone_id}
    call_command("chroma_orphans", "--drop")
    assert "dropped" in capsys.readouterr().out
    remaining = stored_corpus_ids()
    assert set(remaining) == {corpus.pk} and set(remaining[corpus.pk]) == set(collection_names(corpus.pk))


def test_a_chroma_host_that_never_answers_fails_within_the_timeout():
    """A real TCP listener that accepts and then says nothing (as a host dropping packets after
    the handshake would): the client gives up after its timeout instead of waiting forever."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        with pytest.raises(ChromaDBConnectionError, match="cannot connect to Chroma at http://127.0.0.1"):
            connect_chroma(url=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=1.0)
        assert time.monotonic() - started < 10
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        silent.close()


def test_one_llm_client_is_kept_per_server_and_forgotten_on_reset(settings):
    # The client remembers whether its server continues an answer: one per server, so it asks once.
    settings.LLM_BASE_URL = "http://127.0.0.1:9"
    client = clients.llm_client()
    assert clients.llm_client() is client and client.base_url == "http://127.0.0.1:9"
    settings.LLM_BASE_URL = "http://127.0.0.1:10"
    assert clients.llm_client() is not client and clients.llm_client().base_url == "http://127.0.0.1:10"
    settings.LLM_BASE_URL = "http://127.0.0.1:9"
    assert clients.llm_client() is client
    runtime.reset()
    assert clients.llm_client() is not client


def test_a_slow_load_keeps_no_other_key_waiting_and_makes_its_own_value_once():
    """cache.BoundedCache (issue 30.4): a value is made outside the map's lock, once per key."""
    import threading
    import time

    from core.cache import BoundedCache

    cache: BoundedCache[str, object] = BoundedCache(4)
    cache.get("ready", lambda: "value")
    loading, release = threading.Event(), threading.Event()
    made: list[str] = []

    def slow() -> str:
        made.append("slow")
        loading.set()
        release.wait(10)
        return "slow value"

    results: list[str] = []
    first = threading.Thread(target=lambda: results.append(cache.get("slow", slow)))
    second = threading.Thread(target=lambda: results.append(cache.get("slow", slow)))
    first.start()
    assert loading.wait(10)
    second.start()
    started = time.monotonic()
    assert cache.get("ready", lambda: "never made") == "value"  # not behind the slow load
    assert time.monotonic() - started < 0.5
    release.set()
    first.join(10)
    second.join(10)
    assert results == ["slow value", "slow value"] and made == ["slow"]


def test_a_failed_load_is_tried_again_by_the_next_request():
    from core.cache import BoundedCache

    cache: BoundedCache[str, int] = BoundedCache(2)

    def broken() -> int:
        raise OSError("model file missing")

    with pytest.raises(OSError):
        cache.get("model", broken)
    assert cache.get("model", lambda: 7) == 7
    assert cache.snapshot() == ["model"]


def test_caches_read_into_memory_are_bounded_by_bytes(settings):
    import numpy as np

    class Held:
        def __init__(self, megabytes: int) -> None:
            self.rows = np.zeros(megabytes * 1024 * 1024, dtype=np.uint8)

    cache = BoundedCache(32, max_bytes=lambda: settings.INDEX_MEMORY_CACHE_BYTES, weigh=array_bytes)
    settings.INDEX_MEMORY_CACHE_BYTES = 3 * 1024 * 1024
    for key in ("a", "b", "c", "d"):
        cache.get(key, lambda: Held(1))
    assert cache.snapshot() == ["b", "c", "d"] and cache.bytes == 3 * 1024 * 1024
    cache.get("big", lambda: Held(5))  # larger than the bound on its own: kept, alone
    assert cache.snapshot() == ["big"]


def test_a_word_index_whose_build_vanished_is_forgotten_without_its_build(
        corpus, owner, dataset, django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    loaded = serving.loaded_build(build.build_dir)
    assert serving.word_index_for(loaded) is not None
    serving._builds.clear()  # evicted from the builds' cache, its word index still held
    assert serving._word_indexes.snapshot()
    shutil.rmtree(build.build_dir)  # deleted by another process
    serving.forget_vanished_builds()
    assert serving._word_indexes.snapshot() == []


def test_deleting_a_corpus_forgets_its_mapped_builds(
    corpus, owner, dataset, django_capture_on_commit_callbacks
):
    from corpus.services.corpora import corpus_delete

    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert memories_search(user=owner, corpus_ids=[corpus.pk], query="storming of the Bastille")
    assert str(Path(build.build_dir).resolve()) in serving.loaded_build_dirs()
    with django_capture_on_commit_callbacks(execute=True):
        corpus_delete(corpus=corpus)
    assert serving.loaded_build_dirs() == [] and serving._word_indexes.snapshot() == []
    assert not Path(build.build_dir).exists()


def test_threads_share_one_tokenizer_and_its_cache(gemma_gguf):
    from engine.spm import GGUFTokenizer

    shared = GGUFTokenizer.from_gguf(gemma_gguf, cache_size=64)  # evictions on nearly every new word
    texts = [" ".join(f"word{n}x{i} river{i % 7} glucose" for n in range(40)) for i in range(24)]
    expected = [shared.tokenize(text) for text in texts]
    errors, found = [], {}

    def work(number: int) -> None:
        try:
            for _ in range(5):
                for i in range(number % 3, len(texts), 3):
                    found[(number, i)] = shared.tokenize(texts[i])
        except Exception as error:  # noqa: BLE001 - the test reports any
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(ids == expected[i] for (_, i), ids in found.items())
    assert len(shared._cache) <= 64


def test_reset_forgets_the_engine_s_own_caches():
    from engine.vocab import _projection64

    _projection64(8, 64, 1)
    assert _projection64.cache_info().currsize == 1
    runtime.reset()
    assert _projection64.cache_info().currsize == 0
