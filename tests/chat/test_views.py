"""Chat pages and exports through the real URLs: what the owner can do, what an outsider cannot see."""

from __future__ import annotations

import dataclasses
import json

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import DEFAULT_TITLE, Conversation, Message
from chat.services import conversation_add_response, message_create_assistant, message_create_user
from engine.loaded_build import MemoryRecord
from memory.services import MemoryResult
from tests.plugins.chat import make_corpus

pytestmark = pytest.mark.django_db

MEMORY = MemoryResult(memory=MemoryRecord(hdv_idx=3, content_hash="abc123", text="Generators pause at yield.",
                                          token_count=7, metadata={"source": "pydoc-topics.jsonl"}),
                      hdc_score=812.0, target="1", late_score=None, fused_score=None, merge_score=None,
                      meaning_score=None, corpus_id=1, corpus_name="pydoc", dataset_name="pydoc-topics.jsonl",
                      late_kind=None)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def chat(users):
    owner, _, _ = users
    client = _client(owner)
    client.post(reverse("chat:new"))
    conversation = Conversation.objects.get(owner=owner)
    message_create_user(conversation_id=conversation.pk, content="What is a generator?\nPlease be brief.")
    message_create_assistant(conversation_id=conversation.pk, content="A function that **yields**.",
                             status="complete", memories=[MEMORY])
    message_create_user(conversation_id=conversation.pk, content="And a coroutine?")
    message_create_assistant(conversation_id=conversation.pk, content="", status="error",
                             error="LLM server unreachable at http://127.0.0.1:9")
    conversation.refresh_from_db()
    return conversation


def test_owner_page_lists_conversations_and_bootstraps_messages(users, chat):
    owner, _, _ = users
    client = _client(owner)
    assert client.get(reverse("chat:index")).url == reverse("chat:detail", args=[chat.pk])
    page = client.get(reverse("chat:detail", args=[chat.pk]))
    assert page.status_code == 200
    # The first message named the conversation.
    assert chat.title == "What is a generator?"
    assert "What is a generator?" in page.content.decode()
    boot = page.context["bootstrap"]
    assert [m["role"] for m in boot["messages"]] == ["user", "assistant", "user", "assistant"]
    assert boot["messages"][1]["memories"][0]["excerpt"] == "Generators pause at yield."
    assert boot["messages"][3]["status"] == "error"
    assert boot["socket_path"] == f"/ws/chat/{chat.pk}/"
    html = page.content.decode()
    assert "vendor/marked/marked.umd.js" in html and "vendor/dompurify/purify.min.js" in html
    assert 'id="chat-bootstrap"' in html


def test_empty_state_links_to_corpora(users):
    _, _, outsider = users
    page = _client(outsider).get(reverse("chat:index"))
    assert page.status_code == 200
    html = page.content.decode()
    assert reverse("corpus:list") in html and "no searchable corpus" in html


def test_new_conversation_takes_readable_searchable_corpora(users, pydoc_build):
    owner, other, _ = users
    mine = make_corpus(owner, pydoc_build)
    client = _client(other)
    client.post(reverse("chat:new"))
    conversation = Conversation.objects.get(owner=other)
    assert list(conversation.corpora.all()) == []  # the owner's private corpus is not other's
    client = _client(owner)
    client.post(reverse("chat:new"))
    conversation = Conversation.objects.get(owner=owner)
    assert list(conversation.corpora.all()) == [mine]
    assert conversation.title == DEFAULT_TITLE and conversation.blend_state == {}


def test_settings_rename_and_reset_blend(users, chat, pydoc_build):
    owner, _, outsider = users
    theirs = make_corpus(outsider, pydoc_build, name="secret")
    client = _client(owner)
    url = reverse("chat:settings", args=[chat.pk])
    client.post(url, {"use_memory": "on", "top_document": "on", "token_budget": "300"})
    chat.refresh_from_db()
    assert (chat.use_memory, chat.top_document, chat.compress_context, chat.token_budget) == (
        True,
        True,
        False,
        300,
    )
    # A corpus the owner may not read is refused, and nothing changes.
    response = client.post(url, {"corpora": [str(theirs.pk)], "token_budget": "999"}, follow=True)
    assert "Unknown or unreadable corpora" in response.content.decode()
    chat.refresh_from_db()
    assert (list(chat.corpora.all()), chat.token_budget) == ([], 300)
    response = client.post(url, {"token_budget": "0"}, follow=True)
    assert "token budget must be between" in response.content.decode()

    # The answers' temperature: a number in range, blank for the model's default; anything else
    # is a clear message and changes nothing.
    client.post(url, {"temperature": "0.3"})
    chat.refresh_from_db()
    assert chat.temperature == 0.3
    for bad, message in (("hot", "temperature must be a number"), ("2.5", "temperature must be between"),
                         ("nan", "temperature must be between"), ("1e999", "temperature must be between")):
        response = client.post(url, {"temperature": bad}, follow=True)
        assert response.status_code == 200 and message in response.content.decode()
        chat.refresh_from_db()
        assert chat.temperature == 0.3
    client.post(url, {"temperature": ""})
    chat.refresh_from_db()
    assert chat.temperature is None
    # The outsider cannot change someone else's conversation.
    assert _client(outsider).post(url, {"temperature": "1.0"}).status_code == 404

    client.post(reverse("chat:rename", args=[chat.pk]), {"title": "  Generators  "})
    chat.refresh_from_db()
    assert chat.title == "Generators"
    client.post(reverse("chat:rename", args=[chat.pk]), {"title": "   "})
    chat.refresh_from_db()
    assert chat.title == "Generators"

    conversation_add_response(conversation_id=chat.pk, text="an answer")
    chat.refresh_from_db()
    assert chat.blend_state["responses"] == ["an answer"]
    client.post(reverse("chat:reset_blend", args=[chat.pk]))
    chat.refresh_from_db()
    assert chat.blend_state["responses"] == []


def test_exports(users, chat):
    owner, _, _ = users
    client = _client(owner)
    response = client.get(reverse("chat:export_jsonl", args=[chat.pk]))
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="conversation-')
    lines = response.content.decode().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    # The failed answer has no text and is left out; roles map to ShareGPT's names.
    assert record["conversations"] == [
        {"from": "human", "value": "What is a generator?\nPlease be brief."},
        {
            "from": "gpt",
            "value": "A function that **yields**.",
            "grounding": None,
            "citations": [],
            "model": "",
        },
        {"from": "human", "value": "And a coroutine?"},
    ]
    markdown = client.get(reverse("chat:export_markdown", args=[chat.pk])).content.decode()
    assert markdown.startswith(f"# {chat.title}\n")
    assert "## You\n\nWhat is a generator?" in markdown
    assert "## Assistant\n\nA function that **yields**." in markdown
    assert "**pydoc / pydoc-topics.jsonl** (score 812): Generators pause at yield." in markdown
    assert "## Assistant (error)" in markdown and "> Error: LLM server unreachable" in markdown


def test_markdown_export_keeps_a_memorys_markup_as_text(users, chat):
    """A memory's excerpt and source name are text in the export: its tags, code and emphasis are
    escaped, so they neither run as HTML inside the <details> block nor restyle the lines around."""
    owner, _, _ = users
    text = "A <script>alert(1)</script> & `code`\n\n*not emphasis* | # not a heading"
    marked = dataclasses.replace(MEMORY, memory=dataclasses.replace(MEMORY.memory, text=text,
                                                                   metadata={"source": "notes_*draft*.md"}),
                                 dataset_name="notes_*draft*.md")
    message_create_assistant(conversation_id=chat.pk, content="Marked.", status="complete", memories=[marked])
    markdown = _client(owner).get(reverse("chat:export_markdown", args=[chat.pk])).content.decode()
    line = next(line for line in markdown.splitlines() if "alert(1)" in line)
    assert line == (
        r"1. **pydoc / notes\_\*draft\*.md** (score 812): A &lt;script&gt;alert(1)&lt;/script&gt; &amp; "
        r"\`code\` \*not emphasis\* \| \# not a heading"
    )
    assert "<script>" not in markdown


def test_an_answers_memory_keeps_its_place_in_the_page_and_the_export(users, chat):
    """The place of a memory (`engine.places`) is kept with the answer: the chat page's data and the
    Markdown export name it as the citation does ("page 12")."""
    owner, _, _ = users
    paged = dataclasses.replace(MEMORY, memory=dataclasses.replace(MEMORY.memory, metadata={"page": 12}))
    message_create_assistant(conversation_id=chat.pk, content="Paged.", status="complete", memories=[paged])
    client = _client(owner)
    markdown = client.get(reverse("chat:export_markdown", args=[chat.pk])).content.decode()
    assert "1. **pydoc / pydoc-topics.jsonl, page 12** (score 812)" in markdown
    stored = Message.objects.get(conversation=chat, content="Paged.").memories.get()
    assert stored.place == "page 12"


def test_outsider_sees_nothing_and_changes_nothing(users, chat):
    _, _, outsider = users
    client = _client(outsider)
    for name in ("chat:detail", "chat:export_jsonl", "chat:export_markdown"):
        assert client.get(reverse(name, args=[chat.pk])).status_code == 404, name
    for name in ("chat:settings", "chat:rename", "chat:reset_blend", "chat:delete"):
        assert client.post(reverse(name, args=[chat.pk]), {"title": "pwned"}).status_code == 404, name
    assert Conversation.objects.filter(pk=chat.pk, title=chat.title).exists()
    page = _client(outsider).get(reverse("chat:index")).content.decode()
    assert chat.title not in page
    assert Client().get(reverse("chat:detail", args=[chat.pk])).status_code == 302  # to the login page


def test_delete_removes_conversation_and_messages(users, chat):
    owner, _, _ = users
    response = _client(owner).post(reverse("chat:delete", args=[chat.pk]))
    assert response.url == reverse("chat:index")
    assert not Conversation.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.filter(conversation_id=chat.pk).exists()


def test_get_is_refused_on_writes(users, chat):
    owner, _, _ = users
    assert _client(owner).get(reverse("chat:delete", args=[chat.pk])).status_code == 405
    assert Conversation.objects.filter(pk=chat.pk).exists()
