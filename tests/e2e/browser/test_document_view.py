"""From a chat answer's citation to the place in the source: a PDF (written by fpdf2) is uploaded and
built by the live portal's worker; an answer citing the memory of its second page is stored as the
portal stores one (the memory's place kept with it); on the chat page the citation reads "[1, page 2]"
and a click opens the document view at page 2, the passage marked and scrolled to, the page's image
rendered by the portal. A user the corpus is not shared with gets 404 for the view, the page image and
the original."""

from __future__ import annotations

import base64
import json
import re

from tests.documents import written_pdf_bytes
from tests.e2e.browser.conftest import BUSY_MACHINE_SECONDS, DROP, PASSWORD, log_in, wait_until

USER = "dana"
PAGES = [["The harbour of Alexandria held the great lighthouse, one of the wonders of the ancient "
          "world."],
         ["The Rosetta Stone was found in 1799 near the town of Rashid in the Nile delta."],
         ["Glycolysis splits one molecule of glucose into two molecules of pyruvate."]]
QUESTION = "Where was the Rosetta Stone found?"
ANSWER = "The Rosetta Stone was found near Rashid in 1799."
CITATIONS = [{"text": ANSWER, "claim": True, "memories": [0], "scores": [0.9], "certainty": 0.9,
              "unsure": False}]

STORE_ANSWER = """
import json, os
from chat.models import Conversation, Message, MessageMemory
from corpus.models import Memory
from engine.places import place_label
case = json.loads(os.environ["CASE"])
memory = Memory.objects.get(pk=case["memory"])
conversation = Conversation.objects.get(pk=case["conversation"])
Message.objects.create(conversation=conversation, role="user", content=case["question"])
answer = Message.objects.create(conversation=conversation, role="assistant", content=case["answer"],
                                status="complete", grounding=0.9, citations=case["citations"],
                                prompt_tokens=80, completion_tokens=20, finish_reason="stop")
MessageMemory.objects.create(message=answer, rank=0, memory=memory, memory_key=memory.content_hash,
                             corpus_name="Egypt", source="history.pdf", score=900.0,
                             token_count=memory.token_count, excerpt=memory.text,
                             place=place_label(memory.metadata))
"""

READ_MEMORIES = """
import json
from corpus.models import Memory
rows = Memory.objects.filter(corpus__name="Egypt").order_by("hdv_idx")
print(json.dumps([{"id": m.pk, "page": m.metadata.get("page"), "text": m.text} for m in rows]))
"""


def _pdf_corpus(page, live_portal) -> list[dict]:  # noqa: ANN001 - playwright Page
    page.goto(f"{live_portal.url}/corpora/new/")
    page.get_by_label("Name").fill("Egypt")
    page.get_by_label("HDC dimensions").fill("4096")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(r"/corpora/\d+/$"))
    pdf = base64.b64encode(written_pdf_bytes(PAGES)).decode()
    page.evaluate(DROP, [page.locator("#drop-zone").element_handle(), [["history.pdf", pdf]]])
    wait_until(page, "document.querySelectorAll('#upload-list .upload-item.ok').length === 1")
    page.goto(page.url)
    page.get_by_role("button", name="Build index").click()
    page.wait_for_selector("#builds tbody tr:first-child .pill:text('active')",
                           timeout=BUSY_MACHINE_SECONDS * 1000)
    return json.loads(live_portal.shell(READ_MEMORIES))


def test_a_citation_opens_the_pdf_page_with_the_passage_marked(browser, live_portal, screenshot):
    live_portal.shell("from django.contrib.auth.models import User; import json, os; "
                      "User.objects.create_user(json.loads(os.environ['NAME']), "
                      "password=json.loads(os.environ['PASSWORD']))",
                      NAME=USER, PASSWORD=PASSWORD)
    page = log_in(browser, live_portal, USER)
    memories = _pdf_corpus(page, live_portal)
    assert [m["page"] for m in memories] == [1, 2, 3]
    cited = memories[1]
    page.goto(f"{live_portal.url}/chat/")
    page.get_by_role("button", name="Start a conversation").click()
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    conversation = int(re.search(r"/chat/(\d+)/$", page.url).group(1))
    live_portal.shell(STORE_ANSWER, CASE={"conversation": conversation, "memory": cited["id"],
                                          "question": QUESTION, "answer": ANSWER, "citations": CITATIONS})
    page.goto(f"{live_portal.url}/chat/{conversation}/")
    cite = page.locator("#chat-messages li.chat-assistant .chat-cite").first
    assert cite.inner_text() == "[1, page 2]"
    assert cite.get_attribute("aria-label") == "Supported by memory 1 (history.pdf, page 2)"
    cite.click()
    page.wait_for_url(re.compile(rf"/corpora/\d+/documents/\d+/\?memory={cited['id']}#passage$"))
    view_url = page.url.split("#")[0]
    assert page.locator("#place").inner_text() == "page 2"
    passage = page.locator("mark#passage")
    assert passage.text_content() == cited["text"] and "Rosetta Stone" in cited["text"]
    assert passage.is_visible()
    assert passage.evaluate("(m) => m.getBoundingClientRect().top < window.innerHeight"), "scrolled to"
    image_url = page.locator("svg.page-image image").get_attribute("href")
    assert image_url.endswith("/pages/2.png")
    image = page.request.get(f"{live_portal.url}{image_url}")
    assert image.status == 200 and image.headers["content-type"] == "image/png"
    assert image.body()[:8] == b"\x89PNG\r\n\x1a\n"
    original_url = page.locator("#download-original").get_attribute("href")
    assert page.request.get(f"{live_portal.url}{original_url}").body()[:5] == b"%PDF-"
    screenshot(page, "18-document-view-pdf-page")  # docs/portal-document.png
    page.context.close()

    outsider = log_in(browser, live_portal, "bob")
    for url in (view_url, f"{live_portal.url}{image_url}", f"{live_portal.url}{original_url}"):
        assert outsider.request.get(url).status == 404, url
    outsider.context.close()
