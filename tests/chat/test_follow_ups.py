"""Follow-up turns through the real packaged chat model (Qwen2.5-Coder 0.5B on llama.cpp) over the real
demo corpus (`manage.py portal_bootstrap`, built by the real build service): each answer of a
conversation stays on its own question, judged by the memories it cites, and copies no code block of
an earlier answer (the history policy, engine.llm.history)."""

from __future__ import annotations

import io

import pytest
import yaml
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.db import connections

from bench.answer_chains import repeats
from chat.services import conversation_create
from chat.turns import run_turn
from core import runtime
from corpus.management.commands.portal_bootstrap import DEMO_NAME
from corpus.models import Corpus

pytestmark = pytest.mark.django_db(transaction=True)
db = database_sync_to_async
CHAIN = ("How do I read rows from a CSV file?", "What does the nonlocal statement do?",
         "How can I cache the results of an expensive function?")
# What a memory on each question's topic says (a demo memory of a standard-library object begins with
# its name, "csv.Sniffer"; the language reference's nonlocal topic names the statement).
ON_TOPIC = ({"csv", "CSV"}, {"nonlocal"}, {"lru_cache", "functools.cache"})
CSV_READERS = {"csv.reader", "csv.DictReader"}


@pytest.fixture(autouse=True)
async def close_sync_thread_connections():
    yield
    await db(connections.close_all)()


@pytest.fixture
def qwen_settings(settings, chat_llama_server, tmp_path, celery_eager):
    """The portal on the packaged chat model, greedy, with answers short enough for a 2-core CPU;
    the context is one of the server's two slots (4096 / 2)."""
    config_file = tmp_path / "engine.yaml"
    config_file.write_text(yaml.safe_dump({"max_new_tokens": 256, "llama_context_size": 2048,
                                           "temperature": 0.0, "top_p": 1.0}))
    settings.LLM_BASE_URL = chat_llama_server.base_url
    settings.LLM_TIMEOUT_SECONDS = 300
    settings.HDRAG_CONFIG_FILE = str(config_file)
    settings.DATA_DIR = tmp_path / "data"
    settings.CHROMA_PATH, settings.CHROMA_URL = settings.DATA_DIR / "chroma", ""
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "data" / "tmp")
    (tmp_path / "data" / "tmp").mkdir(parents=True)
    runtime.reset()
    runtime.engine_config.cache_clear()
    yield settings
    runtime.engine_config.cache_clear()
    runtime.reset()


def _demo_corpus(capture) -> Corpus:  # noqa: ANN001 - django_capture_on_commit_callbacks
    with capture(execute=True):
        call_command("portal_bootstrap", stdout=io.StringIO())
    return Corpus.objects.select_related("owner", "active_build").get(name=DEMO_NAME)


async def _ask(user, conversation_id: int, question: str) -> tuple[str, list[str], list[str]]:  # noqa: ANN001
    """(answer, the primed memories' texts, the texts of the memories its sentences cite)."""
    events: list[dict] = []

    async def emit(event: dict) -> None:
        events.append(event)

    result = await run_turn(conversation_id=conversation_id, user_id=user.pk, content=question, emit=emit)
    done = events[-1]
    assert done["type"] == "chat.done", done
    primed = [m["excerpt"] for m in next(e for e in events if e["type"] == "chat.memories")["memories"]]
    cited = {rank for citation in done["citations"] for rank in citation["memories"]}
    return result.content, primed, [primed[rank] for rank in sorted(cited)]


def _about(texts: list[str], names: set[str]) -> bool:
    return any(name in text for text in texts for name in names)


async def test_three_unrelated_questions_are_each_answered_from_their_own_memories(
        qwen_settings, django_capture_on_commit_callbacks):
    """One demo build (the costly part) for the whole chain: the first answer reads CSV rows from
    csv.reader's or csv.DictReader's own text; each later one cites its own topic and repeats nothing."""
    corpus = await db(_demo_corpus)(django_capture_on_commit_callbacks)
    assert corpus.active_build is not None
    conversation = await db(conversation_create)(user=corpus.owner, corpus_ids=[corpus.pk], temperature=0.0)
    answers: list[str] = []
    for number, (question, topic) in enumerate(zip(CHAIN, ON_TOPIC, strict=True)):
        answer, primed, cited = await _ask(corpus.owner, conversation.pk, question)
        others = set().union(*(names for other, names in enumerate(ON_TOPIC) if other != number))
        if number == 0:
            assert "reader" in answer.lower(), answer
            # Their own text: a docstring memory begins with its object's name.
            assert any(text.startswith(name) for text in cited for name in CSV_READERS), \
                (answer, [text[:80] for text in primed])
        else:
            assert _about(cited, topic), (question, answer, [text[:80] for text in primed])
        assert not _about(cited, others), (question, answer, [text[:80] for text in cited])
        assert not repeats(answer, answers), (question, answer, answers)
        answers.append(answer)
