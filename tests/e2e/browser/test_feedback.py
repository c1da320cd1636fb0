"""Feedback in a real browser: a person rates an answer down with a comment from the chat page (the
thumbs under it, over the websocket), and staff find it on the Feedback page with its question, the
memories that primed it and the comment. The answer is stored through the services (the LLM is not
what is tested here)."""

from __future__ import annotations

from tests.e2e.browser.conftest import BUSY_MACHINE_SECONDS, STAFF, log_in

QUESTION = "Which statement binds a name in the enclosing function's scope?"
ANSWER = "The global statement binds it in the enclosing scope."
EXCERPT = "The nonlocal statement causes the listed identifiers to refer to previously bound variables."
COMMENT = "It says global; the memory says nonlocal."

STORE = """
import json, os
from django.contrib.auth.models import User
from chat.models import Message, MessageMemory
from chat.services import conversation_create
case = json.loads(os.environ["CASE"])
conversation = conversation_create(user=User.objects.get(username=case["user"]), title="Scopes")
Message.objects.create(conversation=conversation, role="user", content=case["question"])
answer = Message.objects.create(conversation=conversation, role="assistant", content=case["answer"],
                                status="complete", grounding=0.0, citations=[], model="qwen")
MessageMemory.objects.create(message=answer, rank=0, memory_key="k", corpus_name="Python docs",
                             source="reference/simple_stmts.md", score=0.71, token_count=20,
                             excerpt=case["excerpt"])
print(conversation.pk)
"""


def test_a_thumbs_down_with_a_comment_reaches_the_staff_page(browser, live_portal, screenshot):
    case = {"user": "bob", "question": QUESTION, "answer": ANSWER, "excerpt": EXCERPT}
    conversation = int(live_portal.shell(STORE, CASE=case).strip())
    page = log_in(browser, live_portal, "bob")
    page.goto(f"{live_portal.url}/chat/{conversation}/")
    page.wait_for_selector("#chat-connection[data-state=open]")
    answer = page.locator("#chat-messages li.chat-assistant").last
    answer.get_by_role("button", name="Not helpful: say why").click()
    answer.get_by_label("What was wrong with this answer").fill(COMMENT)
    answer.get_by_role("button", name="Send").click()
    page.wait_for_selector(".chat-feedback[data-rating=down] [data-rating=down][aria-pressed=true]",
                           timeout=BUSY_MACHINE_SECONDS * 1000)
    screenshot(page, "chat-feedback")
    page.reload()  # stored: the rating comes back with the page
    page.wait_for_selector(".chat-feedback[data-rating=down]")
    page.context.close()

    staff = log_in(browser, live_portal, STAFF)
    staff.goto(f"{live_portal.url}/chat/feedback/?rating=down")
    record = staff.locator("article.feedback-record").first
    assert QUESTION in record.inner_text() and COMMENT in record.inner_text()
    record.get_by_text("1 memory primed it").click()
    assert EXCERPT in record.inner_text() and "reference/simple_stmts.md" in record.inner_text()
    screenshot(staff, "staff-feedback")
    staff.context.close()
