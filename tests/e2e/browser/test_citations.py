"""Citations on a real corpus whose memories are full of markup: paragraphs, quotes, `<`, `&`,
backticks, Markdown of their own, a fenced code block and a very long line. The memories are
built by the live portal's worker from uploaded files; the answer that cites them is known
(a WebSocket route serves it live, and the same answer is stored for the reload), so the test
can say exactly what the page must show: the answer's own text plus the citation marks, never
a memory's text or a tag written out as text."""

from __future__ import annotations

import base64
import json
import re

from tests.e2e.browser.conftest import BUSY_MACHINE_SECONDS, DROP, PASSWORD, log_in, wait_until

USER = "erin"
# One line of 430 characters (a memory is at most 256 tokens: common words keep it in one).
LONG_LINE = "A very long line: " + " ".join(["the quick brown fox jumps over the lazy dog"] * 9) + " word149."
RECORDS = [
    'The "nonlocal" statement\n────────\n\nnonlocal_stmt ::= "nonlocal" identifier ("," identifier)*\n\n'
    'The "nonlocal" statement causes the listed identifiers to refer to previously bound variables in the '
    'nearest enclosing scope excluding globals. It\'s <important> & "subtle".\n\n'
    'Names listed in a "nonlocal" statement must not collide with *pre-existing* bindings in the '
    'local_scope.\n\n'
    "# Not a heading\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    "```python\ndef outer():\n    x = 1\n    def inner():\n        nonlocal x\n```",
    "Backticks `code` and <b>bold</b> & entities &amp; in \"double\" and 'single' quotes.\n\n"
    "A second paragraph with _underscores_, **stars** and a </span> closing tag.\n\n"
    "<script>document.title = 'owned'</script> A third paragraph.\n\n" + LONG_LINE,
]
SENTENCES = [
    "The `nonlocal` statement binds names to the *nearest* enclosing scope, never the global one.",
    "It refers to variables bound before & outside the function < its caller.",
    "It was added in Python 2.0.",
    "See the table.",
]
ANSWER = (f"{SENTENCES[0]} {SENTENCES[1]}\n\n| statement | scope |\n|---|---|\n| nonlocal | enclosing |\n\n"
          f"```python\nnonlocal x\n```\n\n{SENTENCES[2]} {SENTENCES[3]}")
CITATIONS = [
    {
        "text": SENTENCES[0],
        "claim": True,
        "memories": [0, 1],
        "scores": [0.9, 0.7],
        "certainty": 0.9,
        "unsure": False,
    },
    {"text": SENTENCES[1], "claim": True, "memories": [0], "scores": [0.7], "certainty": 0.3, "unsure": True},
    {"text": SENTENCES[2], "claim": True, "memories": [], "scores": [0.0], "certainty": 0.8, "unsure": False},
    {"text": SENTENCES[3], "claim": False, "memories": [], "scores": [], "certainty": 1.0, "unsure": False},
]
GROUNDING = (0.9 + 0.3) / 3

# What the page shows of an answer, read in the page: the body's text without the citation marks,
# the same answer rendered alone by the page's own renderer, and every mark that was added.
READ_ANSWER = """(body, content) => {
  const bare = body.cloneNode(true);
  bare.querySelectorAll(".chat-marks").forEach((marks) => marks.remove());
  const alone = document.createElement("div");
  alone.innerHTML = DOMPurify.sanitize(marked.parse(content));
  const marks = [...body.querySelectorAll(".chat-marks > *")].map((mark) => ({
    tag: mark.tagName, cls: mark.className, text: mark.textContent, title: mark.title,
    href: mark.getAttribute("href"), label: mark.getAttribute("aria-label")}));
  return {bare: bare.textContent, alone: alone.textContent, marks,
          tags: body.querySelectorAll("script, b, span:not(.chat-marks):not(.chat-marks *)").length};
}"""

STORE_ANSWER = """
import json, os
from chat.models import Conversation, Message, MessageMemory
case = json.loads(os.environ["CASE"])
conversation = Conversation.objects.get(pk=case["conversation"])
Conversation.objects.filter(pk=conversation.pk).update(title=case["question"])
Message.objects.create(conversation=conversation, role="user", content=case["question"])
answer = Message.objects.create(conversation=conversation, role="assistant", content=case["answer"],
                                status="complete", grounding=case["grounding"], citations=case["citations"],
                                prompt_tokens=120, completion_tokens=60, finish_reason="stop")
for memory in case["memories"]:
    MessageMemory.objects.create(message=answer, rank=memory["rank"], memory_id=memory["memory_id"],
                                 memory_key=memory["key"], corpus_name=memory["corpus"],
                                 source=memory["source"], score=memory["score"],
                                 token_count=memory["token_count"], excerpt=memory["excerpt"])
"""

READ_MEMORIES = """
import json, os
from corpus.models import Memory
rows = Memory.objects.filter(corpus__name=json.loads(os.environ["CORPUS"])).order_by("pk")
print(json.dumps([{"id": m.pk, "text": m.text, "key": m.content_hash} for m in rows]))
"""


def _tricky_corpus(page, live_portal) -> list[dict]:  # noqa: ANN001 - playwright Page
    """A corpus built by the live worker from RECORDS; its memory rows (id, text, key)."""
    page.goto(f"{live_portal.url}/corpora/new/")
    page.get_by_label("Name").fill("Markup")
    page.get_by_label("HDC dimensions").fill("4096")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(r"/corpora/\d+/$"))
    files = [[f"markup-{i}.jsonl", base64.b64encode(json.dumps({"text": text}).encode()).decode()]
             for i, text in enumerate(RECORDS, start=1)]
    page.evaluate(DROP, [page.locator("#drop-zone").element_handle(), files])
    wait_until(page, "document.querySelectorAll('#upload-list .upload-item.ok').length === 2")
    page.goto(page.url)
    page.get_by_role("button", name="Build index").click()
    page.wait_for_selector(
        "#builds tbody tr:first-child .pill:text('active')", timeout=BUSY_MACHINE_SECONDS * 1000
    )
    memories = json.loads(live_portal.shell(READ_MEMORIES, CORPUS="Markup"))
    by_text = {memory["text"]: memory for memory in memories}
    assert set(by_text) == set(RECORDS), "each file is one memory, its text as uploaded"
    return [by_text[text] for text in RECORDS]


def _check_answer(answer, memories: list[dict]) -> None:  # noqa: ANN001 - playwright Locator
    read = answer.locator(".chat-body").evaluate(READ_ANSWER, ANSWER)
    # The visible answer is the answer's own text: the marks add to it and take nothing away.
    assert read["bare"] == read["alone"]
    assert read["tags"] == 0, "no tag of a memory's text became an element"
    shown = answer.locator(".chat-body").inner_text()
    for memory_text in (
        "previously bound variables",
        "word149",
        "A third paragraph",
        "chat-cite",
        "<a ",
        "title=",
    ):
        assert memory_text not in shown
    assert "nonlocal x" in answer.locator(".chat-body pre code").inner_text()
    assert answer.locator(".chat-body table td").all_inner_texts() == ["nonlocal", "enclosing"]
    # Each marker links to its memory and holds the memory's whole text for the hover.
    cites = [mark for mark in read["marks"] if mark["cls"] == "chat-cite"]
    # The label names the memory's document (a JSONL record has no place within it: no ", page …").
    assert [(c["text"], c["label"]) for c in cites] == [
        ("[1]", "Supported by memory 1 (markup-1.jsonl)"), ("[2]", "Supported by memory 2 (markup-2.jsonl)"),
        ("[1]", "Supported by memory 1 (markup-1.jsonl)")]
    by_rank = {0: memories[0], 1: memories[1]}
    for cite, rank in zip(cites, (0, 1, 0), strict=True):
        # A click opens the document view at the memory's passage (through the memory's redirect).
        assert cite["tag"] == "A" and cite["href"] == f"/memory/{by_rank[rank]['id']}/document/"
        assert cite["title"] == by_rank[rank]["text"]
    others = [(mark["cls"], mark["text"]) for mark in read["marks"] if mark["cls"] != "chat-cite"]
    assert others == [("chat-unsure", "unsure"), ("chat-unsupported", "unsupported")]
    # In reading order: [1][2] after the first sentence, [1] unsure after the second, unsupported
    # after the third, nothing after the fourth (not a claim).
    assert re.search(r"global one\. \[1\]\[2\]\s*It refers to .* its caller\. \[1\]\s+unsure", shown, re.S), (
        shown
    )
    assert re.search(r"Python 2\.0\.\s+unsupported\s*See the table\.$", shown.strip(), re.S), shown
    assert answer.locator(".chat-note-grounding").inner_text() == \
        "Partly grounded: 2 of 3 claims supported by its memories, 1 of them unsure (grounding 40 %)"


def test_citations_of_memories_full_of_markup_show_as_marks_live_and_after_a_reload(
    browser, live_portal, screenshot
):
    live_portal.shell(
        "from django.contrib.auth.models import User; import json, os; "
        "User.objects.create_user(json.loads(os.environ['NAME']), "
        "password=json.loads(os.environ['PASSWORD']))",
        NAME=USER,
        PASSWORD=PASSWORD,
    )
    page = log_in(browser, live_portal, USER)
    rows = _tricky_corpus(page, live_portal)
    memories = [
        {
            "rank": rank,
            "memory_id": row["id"],
            "url": f"/memory/{row['id']}/",
            "place": "",
            "document_url": f"/memory/{row['id']}/document/",
            "key": row["key"],
            "corpus": "Markup",
            "source": f"markup-{rank + 1}.jsonl",
            "score": 800.0 - rank,
            "token_count": 40,
            "excerpt": row["text"],
        }
        for rank, row in enumerate(rows)
    ]
    message = {
        "id": 99,
        "role": "assistant",
        "content": ANSWER,
        "status": "complete",
        "error": "",
        "created": "2026-11-26T12:00:00+00:00",
        "prompt_tokens": 120,
        "completion_tokens": 60,
        "finish_reason": "stop",
        "memories": memories,
        "grounding": GROUNDING,
        "grounding_word": "partly",
        "citations": CITATIONS,
    }
    question = "What does the nonlocal statement do?"

    def route(ws) -> None:  # noqa: ANN001 - playwright WebSocketRoute
        def from_page(text: str) -> None:
            if json.loads(text).get("type") != "chat.send":
                return
            ws.send(json.dumps({"type": "chat.accepted", "title": "nonlocal", "message": {
                **message, "id": 98, "role": "user", "content": question, "memories": [], "grounding": None,
                "grounding_word": "", "citations": []}}))
            ws.send(json.dumps({"type": "chat.memories", "memories": memories, "retrieval_ms": 1.0}))
            for start in range(0, len(ANSWER), 40):
                ws.send(json.dumps({"type": "chat.delta", "delta": ANSWER[start:start + 40]}))
            ws.send(
                json.dumps(
                    {
                        "type": "chat.done",
                        "status": "complete",
                        "message": message,
                        "blend_turns": 1,
                        "grounding": GROUNDING,
                        "grounding_word": "partly",
                        "citations": CITATIONS,
                    }
                )
            )

        ws.on_message(from_page)

    page.route_web_socket(re.compile(r"/ws/chat/\d+/$"), route)
    page.goto(f"{live_portal.url}/chat/")
    page.get_by_role("button", name="Start a conversation").click()
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    conversation = int(re.search(r"/chat/(\d+)/$", page.url).group(1))
    page.wait_for_selector("#chat-connection[data-state=open]")
    page.get_by_label("Message").fill(question)
    page.get_by_role("button", name="Send").click()
    live = page.locator("#chat-messages li[data-status=complete]").last
    live.wait_for(timeout=BUSY_MACHINE_SECONDS * 1000)
    _check_answer(live, rows)
    assert page.title() != "owned"
    page.context.close()

    # The same answer stored for the conversation, as the portal stores one: the reload renders it
    # from the page's own data.
    live_portal.shell(
        STORE_ANSWER,
        CASE={
            "conversation": conversation,
            "question": question,
            "answer": ANSWER,
            "grounding": GROUNDING,
            "citations": CITATIONS,
            "memories": memories,
        },
    )
    page = log_in(browser, live_portal, USER)
    page.goto(f"{live_portal.url}/chat/{conversation}/")
    stored = page.locator("#chat-messages li.chat-assistant").last
    stored.wait_for()
    _check_answer(stored, rows)
    stored.locator(".chat-cite").first.hover()
    screenshot(page, "17-chat-citations-markup")  # the README's chat picture (docs/portal-chat.png)
    stored.locator(".chat-cite").first.click()
    page.wait_for_url(re.compile(rf"/corpora/\d+/documents/\d+/\?memory={rows[0]['id']}#passage$"))
    assert page.locator("mark#passage").text_content() == RECORDS[0]
    page.context.close()
