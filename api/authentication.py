"""`Authorization: Bearer <token>` (what OpenAI clients send) for integrations; the browser keeps
its session (DRF's SessionAuthentication, CSRF included) after this in the list.

Every token check goes through `bearer_token_check`, which the body-limit layer calls too
(registered by `ApiConfig.ready`, `core.bodylimit.body_limit_credential_check_register`), and so through the
one credential throttle (`accounts.throttle`): a wrong token is counted like a wrong password, and while the
string presented or the client address is locked out a wrong token is answered 429 with Retry-After, so
guessing tokens is as slow as guessing passwords. A right one is admitted even then: it was not
guessed, and a colleague behind the same address keeps working.
"""

from __future__ import annotations

import hashlib

from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from accounts.models import ApiToken
from accounts.services.tokens import api_token_authenticate
from accounts.throttle import random_secret_check
from core.errors import CredentialsLockedOut

KEYWORD = "bearer"
LONGEST_TOKEN = 200


def bearer_token_check(*, request: HttpRequest, authorization: str) -> ApiToken | None:
    """The active token an `Authorization: Bearer <token>` header names, or None (a failure, counted).

    A wrong token raises `CredentialsLockedOut` while the string presented or the client address is
    locked out. Another scheme is no token and is not counted."""
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != KEYWORD:
        return None
    raw = raw.strip()
    # A wrong token names no account: the string itself stands for one (hashed, as tokens are stored).
    account = f"(API token {hashlib.sha256(raw.encode()).hexdigest()[:12]})"
    well_formed = bool(raw) and " " not in raw and len(raw) <= LONGEST_TOKEN
    return random_secret_check(request=request, account=account,
                               check=lambda: api_token_authenticate(raw=raw) if well_formed else None)


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.partition(" ")[0].lower() != KEYWORD:
            return None
        try:
            # The Django request: the throttle marks it, and must not make DRF parse the body.
            token = bearer_token_check(request=request._request, authorization=header)
        except CredentialsLockedOut as locked:
            raise exceptions.Throttled(wait=locked.retry_after, detail=str(locked)) from None
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


def request_token(request: Request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None
