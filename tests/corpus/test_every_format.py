"""Every format the portal reads, on the demo's three paths (issue 58): one corpus per path (files
uploaded through the API, a folder source synced, a ZIP dropped on the corpus page) holding one real
file of each format (tests/every_format.py), built by the real build. Each file's made-up fact is found
by the search API (its document in the top 3, its memory carrying its format) and primed into a chat
answer from the real llama.cpp server: a few turns, each asking for several facts at once, so that each
format is asserted primed on every path without a turn per format."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.urls import reverse

from chat.services import conversation_create
from chat.turns import run_turn
from corpus.models import Corpus
from corpus.sources.services import source_create
from tests.corpus.sources import sync
from tests.corpus.test_batch_uploads import zip_bytes
from tests.every_format import SAMPLES, Sample, every_format
from tests.plugins.api import token_client
from tests.plugins.chat import set_engine_config
from tests.plugins.portal import build_now, login

pytestmark = pytest.mark.django_db(transaction=True)
db = database_sync_to_async
# A few samples per question: their memories fit the conversation's budget together.
GROUP = 5
TOKEN_BUDGET = 1024


@pytest.fixture(autouse=True)
async def close_sync_thread_connections():
    yield
    await db(connections.close_all)()


@pytest.fixture
def short_answers(chat_settings, tmp_path):
    """The session's llama.cpp server, answering in 8 tokens: the test is about what primes it."""
    set_engine_config(chat_settings, tmp_path, max_new_tokens=8)
    return chat_settings


def _posted(corpus: Corpus, owner, archive: bytes) -> dict[str, dict]:  # noqa: ANN001
    """A ZIP dropped on the corpus page, as the page posts it (JSON answer): {member: outcome}."""
    response = login(owner).post(reverse("corpus:dataset_add", args=[corpus.pk]),
                                 {"file": SimpleUploadedFile("drive.zip", archive)},
                                 headers={"Accept": "application/json"})
    assert response.status_code == 200, response.content[:500]
    return {result["name"]: result for result in response.json()["results"]}


def _built(corpus: Corpus, owner, capture) -> None:  # noqa: ANN001
    build = build_now(corpus, owner, capture)
    assert build.status == "succeeded", build.error


def _upload_files(corpus, owner, tmp_path, capture) -> None:  # noqa: ANN001
    """Each file posted to the API's datasets endpoint, as a script uploads them."""
    client = token_client(owner)
    formats = {}
    for name, path in every_format(tmp_path / "files").items():
        response = client.post(f"/api/v1/corpora/{corpus.pk}/datasets/",
                               {"file": SimpleUploadedFile(name, path.read_bytes())}, format="multipart")
        assert response.status_code == 201, (name, response.content[:300])
        formats[name] = response.json()["format"]
    assert formats == {s.name: s.format for s in SAMPLES}
    _built(corpus, owner, capture)


def _upload_zip(corpus, owner, tmp_path, capture) -> None:  # noqa: ANN001
    files = every_format(tmp_path / "files")
    archive = zip_bytes({f"drive/{name}": path.read_bytes() for name, path in files.items()})
    outcomes = _posted(corpus, owner, archive)
    assert {name: outcome["error"] for name, outcome in outcomes.items() if outcome.get("error")} == {}
    formats = {s.name: outcomes[f"drive/{s.name}"]["format"] for s in SAMPLES}
    assert formats == {s.name: s.format for s in SAMPLES}
    _built(corpus, owner, capture)


def _sync_folder(corpus, owner, tmp_path, capture, settings) -> None:  # noqa: ANN001
    root = tmp_path / "shared"
    every_format(root / "drive")
    settings.SOURCE_ROOTS = [str(root)]
    source = source_create(corpus=corpus, user=owner, name="drive", kind="folder",
                           location=str(root / "drive"))
    sync(source, capture)
    assert (source.status, source.failures, source.added) == ("succeeded", [], len(SAMPLES)), source.error
    corpus.refresh_from_db()
    assert corpus.active_build is not None


def _assert_each_found(corpus: Corpus, owner) -> None:  # noqa: ANN001
    """The search API finds each sample's fact in its own document, among the top 3."""
    client = token_client(owner)
    missed = {}
    for sample in SAMPLES:
        response = client.get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": sample.words})
        assert response.status_code == 200, response.content[:300]
        top = response.json()["results"][:3]
        if not any(_is(sample, hit["dataset_name"], hit["text"])
                   and hit["metadata"]["format"] == sample.format for hit in top):
            missed[sample.name] = [(hit["dataset_name"], hit["text"][:60]) for hit in top]
    assert missed == {}


def _is(sample: Sample, source: str, text: str) -> bool:
    """Whether a memory (its dataset's name, its text) is `sample`'s, holding its fact."""
    return source.rsplit("/", 1)[-1] == sample.name and sample.holds in text


async def _assert_each_primed(corpus: Corpus, owner) -> None:  # noqa: ANN001
    """Chat turns, each asking for GROUP samples' facts: each sample's memory primes its answer."""
    unprimed = {}
    for start in range(0, len(SAMPLES), GROUP):
        group = SAMPLES[start:start + GROUP]
        conversation = await db(conversation_create)(user=owner, corpus_ids=[corpus.pk],
                                                     token_budget=TOKEN_BUDGET)
        events: list[dict] = []

        async def emit(event: dict, events: list[dict] = events) -> None:
            events.append(event)

        question = "What do my notes say about " + "; ".join(s.words for s in group) + "?"
        await run_turn(conversation_id=conversation.pk, user_id=owner.pk, content=question, emit=emit)
        assert events[-1]["type"] == "chat.done", events[-1]
        primed = next(e for e in events if e["type"] == "chat.memories")["memories"]
        for sample in group:
            if not any(_is(sample, m["source"], m["excerpt"]) for m in primed):
                unprimed[sample.name] = [(m["source"], m["excerpt"][:40]) for m in primed]
    assert unprimed == {}


async def test_files_uploaded_through_the_api_are_each_found_and_primed(
        short_answers, corpus, owner, tmp_path, django_capture_on_commit_callbacks):
    await db(_upload_files)(corpus, owner, tmp_path, django_capture_on_commit_callbacks)
    await db(_assert_each_found)(corpus, owner)
    await _assert_each_primed(corpus, owner)


async def test_a_folder_source_is_each_found_and_primed(
        short_answers, corpus, owner, tmp_path, django_capture_on_commit_callbacks):
    await db(_sync_folder)(corpus, owner, tmp_path, django_capture_on_commit_callbacks, short_answers)
    await db(_assert_each_found)(corpus, owner)
    await _assert_each_primed(corpus, owner)


async def test_a_zip_posted_on_the_corpus_page_is_each_found_and_primed(
        short_answers, corpus, owner, tmp_path, django_capture_on_commit_callbacks):
    await db(_upload_zip)(corpus, owner, tmp_path, django_capture_on_commit_callbacks)
    await db(_assert_each_found)(corpus, owner)
    await _assert_each_primed(corpus, owner)
