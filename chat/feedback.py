"""Feedback on answers: a person rates an answer of their own conversation (up or down, with an
optional comment) from the chat page (websocket), or the API; staff read the worst-rated answers with
their question, memories, citations and grounding, and export them (`feedback_review`, the staff page
`chat:feedback` and `GET /api/v1/feedback/`)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from chat.models import AnswerFeedback, Message
from core.errors import ApplicationError
from core.spreadsheet import spreadsheet_cell

RATINGS = {"up": AnswerFeedback.Rating.UP, "down": AnswerFeedback.Rating.DOWN}


def _answer_of(*, user: AbstractBaseUser, message_id: int, conversation_id: int | None = None) -> Message:
    """An answer in a conversation `user` owns; Http404 for anything else (outsiders learn nothing)."""
    answers = Message.objects.filter(pk=message_id, conversation__owner=user, role=Message.Role.ASSISTANT)
    if conversation_id is not None:
        answers = answers.filter(conversation_id=conversation_id)
    answer = answers.first()
    if answer is None:
        raise Http404("No such answer.")
    return answer


def feedback_set(*, user: AbstractBaseUser, message_id: int, rating: str | None, comment: str = "",
                 conversation_id: int | None = None) -> AnswerFeedback | None:
    """Rate an answer of one's own (`rating` "up" or "down"; None takes the rating back)."""
    answer = _answer_of(user=user, message_id=message_id, conversation_id=conversation_id)
    if rating is None:
        AnswerFeedback.objects.filter(message=answer).delete()
        return None
    if rating not in RATINGS:
        raise ApplicationError("rating must be up or down.", {"rating": rating})
    if not isinstance(comment, str) or len(comment) > AnswerFeedback.COMMENT_CHARS:
        raise ApplicationError(f"A comment is text of at most {AnswerFeedback.COMMENT_CHARS} characters.",
                               {"comment": "too long" if isinstance(comment, str) else "not text"})
    feedback, _ = AnswerFeedback.objects.update_or_create(
        message=answer, defaults={"user": user, "rating": RATINGS[rating], "comment": comment.strip()})
    return feedback


def feedback_review(*, rating: str = "") -> QuerySet[AnswerFeedback]:
    """Rated answers, the worst first (down before up), newest first within each: what staff read."""
    rated = AnswerFeedback.objects.select_related("message__conversation__owner", "user").prefetch_related(
        "message__memories")
    if rating in RATINGS:
        rated = rated.filter(rating=RATINGS[rating])
    return rated.order_by("rating", "-updated", "-id")


def feedback_question(feedback: AnswerFeedback) -> str:
    """The user turn the rated answer answered."""
    question = (
        Message.objects.filter(
            conversation_id=feedback.message.conversation_id,
            role=Message.Role.USER,
            id__lt=feedback.message_id,
        )
        .order_by("-id")
        .values_list("content", flat=True)
        .first()
    )
    return question or ""


def feedback_record(feedback: AnswerFeedback) -> dict[str, Any]:
    """One rated answer as the export and the API give it."""
    answer = feedback.message
    return {
        "id": feedback.pk,
        "rating": feedback.get_rating_display(),
        "comment": feedback.comment,
        "updated": feedback.updated.isoformat(),
        "user": feedback.user.get_username() if feedback.user else "",
        "conversation": answer.conversation_id,
        "message": answer.pk,
        "question": feedback_question(feedback),
        "answer": answer.content,
        "model": answer.model,
        "grounding": answer.grounding,
        "citations": answer.citations,
        "memories": [
            {
                "rank": m.rank,
                "corpus": m.corpus_name,
                "source": m.source,
                "score": m.score,
                "excerpt": m.excerpt,
            }
            for m in answer.memories.all()
        ],
    }


def feedback_export(rated: Iterable[AnswerFeedback], *, fmt: str) -> str:
    """The rated answers as CSV (one row each, memories' sources joined) or JSONL (whole records)."""
    records = [feedback_record(feedback) for feedback in rated]
    if fmt == "jsonl":
        return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    out = io.StringIO()
    columns = ["id", "rating", "comment", "updated", "user", "conversation", "message", "question", "answer",
               "model", "grounding", "memories"]
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for record in records:
        row = {**record, "memories": " | ".join(f"{m['corpus']}: {m['source']}" for m in record["memories"])}
        writer.writerow({key: spreadsheet_cell(value) for key, value in row.items()})
    return out.getvalue()
