"""A document's own readers in chat, through the real model (llama.cpp, Gemma 3 270M): the turn's
retrieval, the prompt, the OpenAI-compatible endpoint's memories and citations hold only the documents
the person may read (tests/corpus/test_document_access.py has the corpus and its people)."""

from __future__ import annotations

import pytest

from chat.preparation import ConversationState, turn_prepare
from chat.services import conversation_create
from tests.corpus.test_document_access import HR, SALES, SEES, documents, groups, people  # noqa: F401 - fixtures
from tests.plugins.api import token_client

# The endpoint records the turn from another thread (asgiref): on PostgreSQL that thread's own
# connection must see the rows, so they are committed.
pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What does the payroll committee review, when does the Acme contract renew, and when is lunch?"


def test_chat_and_completions_cite_only_readable_documents(chat_settings, corpus, people, documents):  # noqa: F811
    texts = {"hr": HR, "sales": SALES}
    for name in ("bob", "member", "alice"):
        user, allowed = people[name], {documents[key].pk for key in SEES[name]}
        unread = [text for key, lines in texts.items() if key not in SEES[name] for text in lines]
        conversation = conversation_create(user=user, title="Q", corpus_ids=[corpus.pk])
        prepared = turn_prepare(
            user=user, state=ConversationState.of_conversation(conversation), question=QUESTION
        )
        assert prepared.memories and {m.dataset_id for m in prepared.memories} <= allowed, name
        prompt = " ".join(str(m["content"]) for m in prepared.plan.messages)
        assert not any(text[:40] in prompt for text in unread), name
        response = token_client(user).post(
            "/api/v1/chat/completions",
            {
                "model": f"corpus-{corpus.pk}",
                "max_tokens": 40,
                "temperature": 0,
                "messages": [{"role": "user", "content": QUESTION}],
            },
            format="json",
        )
        assert response.status_code == 200, response.content[:300]
        body = response.json()
        assert body["choices"][0]["message"]["content"].strip()
        assert body["memories"] and {m["dataset"] for m in body["memories"]} <= allowed, name
        for citation in body["hdrag"]["citations"]:
            assert all(0 <= rank < len(body["memories"]) for rank in citation["memories"])
