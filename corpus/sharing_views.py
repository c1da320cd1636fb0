"""Sharing pages: an owner shares a corpus with people and groups."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from core.flash import flash
from corpus.models import Corpus
from corpus.selectors import corpus_can_manage, get_corpus_for_user
from corpus.services.sharing import (
    corpus_set_visibility,
    corpus_share_with_group,
    corpus_share_with_user,
    corpus_unshare,
)


def _managed_corpus(request: HttpRequest, pk: int) -> Corpus:
    corpus = get_corpus_for_user(request.user, pk)
    if not corpus_can_manage(user=request.user, corpus=corpus):
        raise PermissionDenied("Only the owner can change who has access.")
    return corpus


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


@require_POST
def share_add(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = _managed_corpus(request, pk)
    access = request.POST.get("access", "read")
    try:
        if request.POST.get("kind") == "group":
            group_id = _int_or_none(request.POST.get("group"))
            if group_id is None:
                raise ApplicationError("Choose a group.")
            target, opened = corpus_share_with_group(
                corpus=corpus, by=request.user, group_id=group_id, access=access
            )
            name = f"group {target.name}"
        else:
            target, opened = corpus_share_with_user(corpus=corpus, username=request.POST.get("username", ""),
                                                    access=access)
            name = target.get_username()
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        verb = "read and change" if access == "write" else "read"
        note = " The corpus was private; it is now shared." if opened else ""
        messages.success(request, f"Shared: {name} may now {verb} this corpus.{note}")
    return redirect(f"{corpus.get_absolute_url()}#sharing")


@require_POST
def share_remove(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = _managed_corpus(request, pk)
    user_id, group_id = _int_or_none(request.POST.get("user")), _int_or_none(request.POST.get("group"))
    if user_id is None and group_id is None:
        messages.error(request, "Say whose access to remove.")
    else:
        corpus_unshare(corpus=corpus, user_id=user_id, group_id=group_id)
        messages.success(request, "Access removed. It applies at once.")
    return redirect(f"{corpus.get_absolute_url()}#sharing")


@require_POST
def visibility_set(request: HttpRequest, pk: int) -> HttpResponse:
    corpus = _managed_corpus(request, pk)
    flash(
        request,
        lambda: corpus_set_visibility(corpus=corpus, visibility=request.POST.get("visibility", "")),
        lambda _: f"Visibility: {corpus.get_visibility_display()}. It applies at once.",
    )
    return redirect(f"{corpus.get_absolute_url()}#sharing")
