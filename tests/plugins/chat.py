"""Chat fixtures: a real llama.cpp server, a small real corpus (Python's own docs, built once per
session with the real Gemma model), users, and helpers to talk to the real ASGI app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from pydoc_data.topics import topics

import pytest
import yaml
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from engine.build import build_index
from engine.config import Config
from engine.spm import GGUFTokenizer

# Small enough for fast tests, long enough that a few paragraphs fill a budget.
MAX_NEW_TOKENS = 40
CONTEXT_SIZE = 2048
TOKEN_BUDGET = 400
EVENT_TIMEOUT = 120


@dataclass(frozen=True)
class PydocBuild:
    build_dir: Path
    records: list[dict]
    dataset_path: Path
    gguf_path: Path


@pytest.fixture(scope="session")
def pydoc_build(tmp_path_factory, gemma_gguf) -> PydocBuild:
    """A real index over paragraphs of Python's documentation topics (source id 1)."""
    root = tmp_path_factory.mktemp("chat-corpus")
    dataset = root / "pydoc-topics.jsonl"
    with open(dataset, "w", encoding="utf-8") as handle:
        for name, text in sorted(topics.items()):
            for paragraph in text.split("\n\n"):
                if len(paragraph.split()) >= 25:
                    handle.write(json.dumps({"text": paragraph.strip(), "topic": name}) + "\n")
    records: list[dict] = []
    build_index(datasets=[(1, "pydoc-topics.jsonl", dataset)], out_dir=root / "build", gguf_path=gemma_gguf,
                tokenizer=GGUFTokenizer.from_gguf(gemma_gguf), config=Config(), sink=records.extend,
                cache_dir=Path(gemma_gguf).parent.parent / "embeddings")
    return PydocBuild(root / "build", records, dataset, Path(gemma_gguf))


@pytest.fixture
def chat_settings(settings, llama_server, tmp_path) -> Iterator:
    """Point the portal at the session's llama.cpp server with a small, greedy generation config."""
    from core import runtime

    config_file = tmp_path / "engine.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "max_new_tokens": MAX_NEW_TOKENS,
                "llama_context_size": CONTEXT_SIZE,
                "temperature": 0.0,
                "top_p": 1.0,
            }
        )
    )
    settings.LLM_BASE_URL = llama_server.base_url
    settings.LLM_TIMEOUT_SECONDS = 120
    settings.HDRAG_CONFIG_FILE = str(config_file)
    settings.DATA_DIR = tmp_path / "data"
    settings.CHROMA_PATH, settings.CHROMA_URL = settings.DATA_DIR / "chroma", ""
    runtime.engine_config.cache_clear()
    yield settings
    runtime.engine_config.cache_clear()


def set_engine_config(settings, tmp_path: Path, **values) -> None:
    """Replace the engine config file's values (generation length, context size) mid-test."""
    from core import runtime

    config_file = tmp_path / "engine-override.yaml"
    base = {
        "max_new_tokens": MAX_NEW_TOKENS,
        "llama_context_size": CONTEXT_SIZE,
        "temperature": 0.0,
        "top_p": 1.0,
    }
    config_file.write_text(yaml.safe_dump({**base, **values}))
    settings.HDRAG_CONFIG_FILE = str(config_file)
    runtime.engine_config.cache_clear()


@pytest.fixture
def users(django_user_model):
    owner = django_user_model.objects.create_user("owner", password="pw-owner-123")
    other = django_user_model.objects.create_user("other", password="pw-other-123")
    outsider = django_user_model.objects.create_user("outsider", password="pw-outsider-123")
    return owner, other, outsider


def make_corpus(owner, build: PydocBuild, *, name: str = "pydoc", visibility: str = "private"):
    """A corpus whose active build is the session's real index, with its memory rows inserted
    by the memory app's own build sink."""
    from corpus.memory_rows import MemoryWriter
    from corpus.models import Dataset, IndexBuild
    from corpus.services.corpora import corpus_create

    corpus = corpus_create(owner=owner, name=name, visibility=visibility)
    # The index stores source id 1 for its one dataset; the dataset row must carry that id
    # (each test starts from an empty database, so it is free).
    dataset = Dataset.objects.create(
        pk=1,
        corpus=corpus,
        name="pydoc-topics.jsonl",
        file=str(build.dataset_path),
        size=build.dataset_path.stat().st_size,
        sha256="0" * 64,
        format="jsonl",
    )
    index_build = IndexBuild.objects.create(
        corpus=corpus,
        status=IndexBuild.Status.SUCCEEDED,
        build_dir=str(build.build_dir),
        documents=len(build.records),
        parameters={
            "gguf_path": str(build.gguf_path),
            "hdc_dimensions": 10000,
            "hdc_seed": 42,
            "hdc_ngram": 5,
        },
    )
    writer = MemoryWriter(build=index_build, dataset_ids=[dataset.pk])
    writer.add(build.records)
    writer.flush()
    corpus.active_build = index_build
    corpus.save(update_fields=["active_build"])
    return corpus


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


async def open_socket(user, conversation_id: int) -> tuple[WebsocketCommunicator, bool, int | None]:
    """Connect through the real ASGI stack (origin check, session auth, routing)."""
    from hdrag_site.asgi import application

    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if user is not None:
        cookie = await database_sync_to_async(session_cookie)(user)
        headers.append((b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    communicator = WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)
    connected, code = await communicator.connect(timeout=30)
    return communicator, connected, code


async def events_until(communicator: WebsocketCommunicator, *final: str, timeout: float = EVENT_TIMEOUT,
                       on_event=None) -> list[dict]:
    """Every event up to and including the first whose type is in `final`."""
    events = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        event = await communicator.receive_json_from(timeout=max(0.1, deadline - loop.time()))
        events.append(event)
        if on_event is not None:
            await on_event(event)
        if event["type"] in final:
            return events
