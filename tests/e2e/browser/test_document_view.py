"""From a chat answer's citations to the places in the sources: a PDF (written by fpdf2), a PowerPoint
deck (python-pptx) and an Excel workbook (openpyxl) are uploaded together and built by the live
portal's worker; one answer citing three of their memories (page 2 of the PDF, slide 3 of the deck,
the row of sheet "Finds") is stored as the portal stores one (each memory's place kept with it), so the
test knows the answer without a model generating it. On the chat page the citations read
"[1, page 2]", "[2, slide 3]" and "[3, Finds!A2:C2]"; a click on each opens the document view at that
place, the passage marked and scrolled to, the place named, and for the PDF the page's image rendered
by the portal. A user the corpus is not shared with gets 404 for each view, the page image and each
original."""

from __future__ import annotations

import base64
import json
import re

from tests.documents import written_pdf_bytes
from tests.e2e.browser.conftest import BUSY_MACHINE_SECONDS, DROP, PASSWORD, log_in, wait_until
from tests.office_files import pptx_file, xlsx_file

USER = "dana"
PAGES = [["The harbour of Alexandria held the great lighthouse, one of the wonders of the ancient "
          "world."],
         ["The Rosetta Stone was found in 1799 near the town of Rashid in the Nile delta."],
         ["Glycolysis splits one molecule of glucose into two molecules of pyruvate."]]
SLIDES = [{"title": "Ancient Egypt", "body": ["A short history of the delta in three slides."]},
          {"title": "The lighthouse", "body": ["The Pharos of Alexandria stood for sixteen centuries."]},
          {"title": "Decipherment", "body": ["Champollion read the hieroglyphs of the stone in 1822."],
           "notes": "Thomas Young had read the royal names before him."}]
SHEETS = {"Finds": [["Object", "Found", "Kept at"], ["Rosetta Stone", 1799, "British Museum"]],
          "Sites": [["Site", "Region"], ["Rashid", "Nile delta"], ["Giza", "Cairo"]]}
QUESTION = "Where was the Rosetta Stone found, who read it, and where is it kept?"
SENTENCES = ["The Rosetta Stone was found near Rashid in 1799.",
             "Champollion read its hieroglyphs in 1822.",
             "It is kept at the British Museum."]
ANSWER = " ".join(SENTENCES)
CITATIONS = [{"text": sentence, "claim": True, "memories": [rank], "scores": [0.9], "certainty": 0.9,
              "unsure": False} for rank, sentence in enumerate(SENTENCES)]
# Each cited memory: its document and the place keys that pick it, and its place in words.
CITED = [("history.pdf", {"page": 2}, "page 2"), ("egypt.pptx", {"slide": 3}, "slide 3"),
         ("finds.xlsx", {"sheet": "Finds"}, "Finds!A2:C2")]

STORE_ANSWER = """
import json, os
from chat.models import Conversation, Message, MessageMemory
from corpus.models import Memory
from engine.places import place_label
case = json.loads(os.environ["CASE"])
conversation = Conversation.objects.get(pk=case["conversation"])
Message.objects.create(conversation=conversation, role="user", content=case["question"])
answer = Message.objects.create(conversation=conversation, role="assistant", content=case["answer"],
                                status="complete", grounding=0.9, citations=case["citations"],
                                prompt_tokens=80, completion_tokens=20, finish_reason="stop")
for rank, memory_id in enumerate(case["memories"]):
    memory = Memory.objects.select_related("dataset").get(pk=memory_id)
    MessageMemory.objects.create(message=answer, rank=rank, memory=memory, memory_key=memory.content_hash,
                                 corpus_name="Egypt", source=memory.dataset.name, score=900.0 - rank,
                                 token_count=memory.token_count, excerpt=memory.text,
                                 place=place_label(memory.metadata))
"""

READ_MEMORIES = """
import json
from corpus.models import Memory
from engine.places import place_label
rows = Memory.objects.filter(corpus__name="Egypt").select_related("dataset").order_by("hdv_idx")
print(json.dumps([{"id": m.pk, "source": m.dataset.name, "metadata": m.metadata, "text": m.text,
                   "place": place_label(m.metadata)} for m in rows]))
"""


def _documents(tmp_path) -> dict[str, bytes]:  # noqa: ANN001 - pytest tmp_path
    """The three uploads, written by their formats' own libraries."""
    return {"history.pdf": written_pdf_bytes(PAGES),
            "egypt.pptx": pptx_file(tmp_path / "egypt.pptx", SLIDES).read_bytes(),
            "finds.xlsx": xlsx_file(tmp_path / "finds.xlsx", SHEETS).read_bytes()}


def _corpus(page, live_portal, uploads: dict[str, bytes]) -> list[dict]:  # noqa: ANN001 - playwright Page
    page.goto(f"{live_portal.url}/corpora/new/")
    page.get_by_label("Name").fill("Egypt")
    page.get_by_label("HDC dimensions").fill("4096")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(r"/corpora/\d+/$"))
    files = [[name, base64.b64encode(data).decode()] for name, data in uploads.items()]
    page.evaluate(DROP, [page.locator("#drop-zone").element_handle(), files])
    wait_until(page, f"document.querySelectorAll('#upload-list .upload-item.ok').length === {len(files)}")
    page.goto(page.url)
    page.get_by_role("button", name="Build index").click()
    page.wait_for_selector("#builds tbody tr:first-child .pill:text('active')",
                           timeout=BUSY_MACHINE_SECONDS * 1000)
    return json.loads(live_portal.shell(READ_MEMORIES))


def _cited(memories: list[dict]) -> list[dict]:
    """The memory of each of CITED: the only one of its document at those place keys."""
    found = []
    for source, keys, place in CITED:
        [memory] = [m for m in memories if m["source"] == source
                    and all(m["metadata"].get(key) == value for key, value in keys.items())]
        assert memory["place"] == place, memory
        found.append(memory)
    return found


def _check_page_image(page, live_portal) -> str:  # noqa: ANN001 - playwright Page
    """The PDF page's image on the view is the portal's PNG of page 2; its address."""
    image_url = page.locator("svg.page-image image").get_attribute("href")
    assert image_url.endswith("/pages/2.png")
    image = page.request.get(f"{live_portal.url}{image_url}")
    assert image.status == 200 and image.headers["content-type"] == "image/png"
    assert image.body()[:8] == b"\x89PNG\r\n\x1a\n"
    return image_url


def _open_citation(page, live_portal, chat_url: str, rank: int, memory: dict) -> str:  # noqa: ANN001
    """Click citation `rank` of the answer; check the document view it opens; its address."""
    page.goto(chat_url)
    page.locator("#chat-messages li.chat-assistant .chat-cite").nth(rank).click()
    page.wait_for_url(re.compile(rf"/corpora/\d+/documents/\d+/\?memory={memory['id']}#passage$"))
    assert page.locator("#place").inner_text() == memory["place"]
    assert page.locator("h1").inner_text() == memory["source"]
    passage = page.locator("mark#passage")
    assert passage.text_content() == memory["text"]
    assert passage.is_visible()
    assert passage.evaluate("(m) => getComputedStyle(m).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert passage.evaluate("(m) => m.getBoundingClientRect().top < window.innerHeight"), "scrolled to"
    return page.url.split("#")[0]


def test_citations_of_a_page_a_slide_and_a_row_open_each_at_its_place(browser, live_portal, screenshot,
                                                                       tmp_path):
    live_portal.shell("from django.contrib.auth.models import User; import json, os; "
                      "User.objects.create_user(json.loads(os.environ['NAME']), "
                      "password=json.loads(os.environ['PASSWORD']))",
                      NAME=USER, PASSWORD=PASSWORD)
    page = log_in(browser, live_portal, USER)
    uploads = _documents(tmp_path)
    cited = _cited(_corpus(page, live_portal, uploads))
    assert "Rosetta Stone" in cited[0]["text"] and "Champollion" in cited[1]["text"]
    assert "British Museum" in cited[2]["text"] and "Giza" not in cited[2]["text"]
    page.goto(f"{live_portal.url}/chat/")
    page.get_by_role("button", name="Start a conversation").click()
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    chat_url = page.url
    live_portal.shell(STORE_ANSWER, CASE={"conversation": int(re.search(r"/chat/(\d+)/$", chat_url).group(1)),
                                          "memories": [m["id"] for m in cited], "question": QUESTION,
                                          "answer": ANSWER, "citations": CITATIONS})
    page.goto(chat_url)
    cites = page.locator("#chat-messages li.chat-assistant .chat-cite")
    assert cites.all_inner_texts() == ["[1, page 2]", "[2, slide 3]", "[3, Finds!A2:C2]"]
    assert [cites.nth(rank).get_attribute("aria-label") for rank in range(3)] == [
        f"Supported by memory {rank + 1} ({m['source']}, {m['place']})" for rank, m in enumerate(cited)]

    private = []
    for rank, memory in enumerate(cited):
        private.append(_open_citation(page, live_portal, chat_url, rank, memory))
        original_url = f"{live_portal.url}{page.locator('#download-original').get_attribute('href')}"
        assert page.request.get(original_url).body() == uploads[memory["source"]]
        private.append(original_url)
        if memory["source"] == "history.pdf":
            private.append(f"{live_portal.url}{_check_page_image(page, live_portal)}")
            screenshot(page, "18-document-view-pdf-page")  # docs/portal-document.png
        else:  # a slide or a sheet has no page image: its text is the view
            assert page.locator("svg.page-image").count() == 0
    screenshot(page, "19-document-view-sheet-row")
    page.context.close()

    outsider = log_in(browser, live_portal, "bob")
    for url in private:
        assert outsider.request.get(url).status == 404, url
    outsider.context.close()
