"""The account page for API tokens: create (shown once), list, revoke."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.services.tokens import (
    api_token_create,
    api_token_revoke,
    api_tokens_for_user,
    get_api_token_for_user,
)
from core.errors import ApplicationError


def token_list(request: HttpRequest) -> HttpResponse:
    created, status = None, 200
    if request.method == "POST":
        try:
            token, secret = api_token_create(user=request.user, name=request.POST.get("name", ""))
        except ApplicationError as error:
            messages.error(request, error.message)
            status = 400
        else:
            # Rendered, not redirected: the secret exists only in this response.
            created = {"token": token, "secret": secret}
            status = 201
    tokens = api_tokens_for_user(user=request.user)
    response = render(request, "accounts/tokens.html", {"tokens": tokens, "created": created}, status=status)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = api_token_revoke(token=get_api_token_for_user(user=request.user, pk=pk))
    messages.success(request, f"Token {token.name!r} revoked; requests with it now fail.")
    return redirect("tokens:list")
