"""Chat pages and exports. Views validate and delegate; every lookup is scoped to the owner."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_POST

from chat import exports
from chat.feedback import feedback_export, feedback_record, feedback_review
from chat.model_rights import models_for
from chat.models import MAX_TEMPERATURE, MAX_TOKEN_BUDGET
from chat.selectors import conversation_get_for_user, conversation_messages, conversations_for_user
from chat.serializers import conversation_json, message_json
from chat.services import (
    conversation_clear_blend,
    conversation_create_next,
    conversation_delete,
    conversation_update,
)
from chat.usage_charts import bar_chart
from chat.usage_report import DAYS_CHOICES, usage_report
from core import runtime
from core.errors import ApplicationError
from corpus.selectors import corpora_visible_to


def _page(request: HttpRequest, conversation=None) -> HttpResponse:  # Conversation | None
    corpora = list(corpora_visible_to(request.user).select_related("active_build").order_by("name", "pk"))
    context = {
        "conversations": conversations_for_user(user=request.user),
        "conversation": conversation,
        "corpora": corpora,
        "searchable_corpora": [c for c in corpora if c.active_build_id],
        "max_token_budget": MAX_TOKEN_BUDGET,
        "max_temperature": MAX_TEMPERATURE,
        "default_temperature": runtime.engine_config().temperature,
        "llm_models": models_for(request.user),  # his default first
    }
    if conversation is not None:
        context["chosen_corpora"] = {c.pk for c in conversation.corpora.all()}
        context["bootstrap"] = {
            "conversation": conversation_json(conversation),
            "messages": [message_json(m) for m in conversation_messages(conversation=conversation)],
            "socket_path": f"/ws/chat/{conversation.pk}/",
        }
    return render(request, "chat/chat.html", context)


@require_GET
def chat_index(request: HttpRequest) -> HttpResponse:
    latest = conversations_for_user(user=request.user).first()
    if latest is not None:
        return redirect("chat:detail", pk=latest.pk)
    return _page(request)


@require_GET
def conversation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _page(request, conversation_get_for_user(user=request.user, pk=pk))


def _checked(request: HttpRequest, name: str) -> bool:
    return request.POST.get(name) in ("on", "1", "true")


def _int_field(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ApplicationError(f"{name} must be a whole number, got {value!r}.", {name: value}) from None


def _temperature_field(value: str) -> float | None:
    """Blank: the model's default; else a number (its range is the service's to check)."""
    if not value.strip():
        return None
    try:
        return float(value)
    except ValueError:
        raise ApplicationError(
            f"The temperature must be a number, got {value!r}.", {"temperature": value}
        ) from None


@require_POST
def conversation_new(request: HttpRequest) -> HttpResponse:
    conversation = conversation_create_next(user=request.user)
    return redirect("chat:detail", pk=conversation.pk)


@require_POST
def conversation_settings(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_get_for_user(user=request.user, pk=pk)
    try:
        conversation_update(
            conversation=conversation,
            corpus_ids=[_int_field(value, "corpus id") for value in request.POST.getlist("corpora")],
            use_memory=_checked(request, "use_memory"),
            top_document=_checked(request, "top_document"),
            compress_context=_checked(request, "compress_context"),
            token_budget=_int_field(
                request.POST.get("token_budget") or str(conversation.token_budget), "token budget"
            ),
            temperature=_temperature_field(request.POST.get("temperature", "")),
            model=request.POST.get("model"),
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Memory settings saved.")
    return redirect("chat:detail", pk=pk)


@require_POST
def conversation_rename(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_get_for_user(user=request.user, pk=pk)
    try:
        conversation_update(conversation=conversation, title=request.POST.get("title", ""))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("chat:detail", pk=pk)


@require_POST
def conversation_reset_blend(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_get_for_user(user=request.user, pk=pk)
    conversation_clear_blend(conversation_id=conversation.pk)
    messages.success(request, "Memory blend reset: the next answer is primed by your message alone.")
    return redirect("chat:detail", pk=pk)


@require_POST
def conversation_remove(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_get_for_user(user=request.user, pk=pk)
    title = conversation.title
    conversation_delete(conversation=conversation)
    messages.success(request, f"Deleted “{title}”.")
    return redirect("chat:index")


def _download(content: str, filename: str, content_type: str) -> HttpResponse:
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def conversation_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    conversation = conversation_get_for_user(user=request.user, pk=pk)
    stem = f"conversation-{conversation.pk}-{slugify(conversation.title)[:40] or 'chat'}"
    kind = "application/x-ndjson" if fmt == "jsonl" else "text/markdown"
    return _download(
        exports.conversation_export(conversation=conversation, fmt=fmt),
        f"{stem}.{fmt}",
        f"{kind}; charset=utf-8",
    )


FEEDBACK_PAGE_SIZE = 25


def _staff_only(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied("Only staff read the team's feedback.")


@require_GET
def feedback_page(request: HttpRequest) -> HttpResponse:
    """Rated answers, the worst first, with their question, memories, citations and grounding (staff)."""
    _staff_only(request)
    rating = request.GET.get("rating", "")
    rated = feedback_review(rating=rating)
    page = Paginator(rated, FEEDBACK_PAGE_SIZE).get_page(request.GET.get("page"))
    records = [feedback_record(feedback) for feedback in page.object_list]
    return render(request, "chat/feedback.html", {"page": page, "records": records, "rating": rating})


@require_GET
def feedback_download(request: HttpRequest, fmt: str) -> HttpResponse:
    _staff_only(request)
    content = feedback_export(feedback_review(rating=request.GET.get("rating", "")), fmt=fmt)
    kind = "text/csv" if fmt == "csv" else "application/x-ndjson"
    response = HttpResponse(content, content_type=f"{kind}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="answer-feedback.{fmt}"'
    return response


def _usage_days(request: HttpRequest) -> int:
    try:
        days = int(request.GET.get("days", 30))
    except ValueError:
        days = 30
    return days if days in DAYS_CHOICES else 30


@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    """Who uses the portal and how well it answers, with plots (staff)."""
    _staff_only(request)
    report = usage_report(days=_usage_days(request))
    daily = [(f"{row['day']:%m-%d}", row["questions"]) for row in report.daily]
    charts = {
        "questions": bar_chart(
            daily,
            label="Questions a day, and people active a day (line)",
            line=[row["people"] for row in report.daily],
            line_label="people active",
        ),
        "grounding": bar_chart(list(report.grounding.items()), label="Answers by grounding"),
        "corpora": bar_chart(
            [(row["corpus"][:14], row["questions"]) for row in report.corpora[:12]],
            label="Questions per corpus",
        ),
    }
    return render(request, "chat/usage.html", {"report": report, "charts": charts, "choices": DAYS_CHOICES})


@require_GET
def usage_download(request: HttpRequest) -> HttpResponse:
    """The report's days as CSV: day, questions, people, tokens."""
    _staff_only(request)
    report = usage_report(days=_usage_days(request))
    lines = ["day,questions,people,tokens"] + [
        f"{row['day']},{row['questions']},{row['people']},{row['tokens']}" for row in report.daily
    ]
    response = HttpResponse("\n".join(lines) + "\n", content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{report.days}-days.csv"'
    return response
