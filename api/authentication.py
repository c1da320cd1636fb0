"""`Authorization: Bearer <token>` (what OpenAI clients send) for integrations; the browser keeps
its session (DRF's SessionAuthentication, CSRF included) after this in the list.

Failed token attempts are counted per client address: after API_AUTH_FAILURES_PER_MINUTE in a
minute, further attempts get 429 with Retry-After before a token is even looked up, so guessing
tokens is as slow as guessing passwords.
"""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from api.models import ApiToken
from api.services import api_token_authenticate

FAILURE_WINDOW_SECONDS = 60


def client_address(request: Request) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword:
            return None
        raw = raw.strip()
        failures_key = f"api-auth-failures:{client_address(request)}"
        if (cache.get(failures_key) or 0) >= settings.API_AUTH_FAILURES_PER_MINUTE:
            raise exceptions.Throttled(wait=FAILURE_WINDOW_SECONDS,
                                       detail="Too many failed token attempts from this address.")
        token = api_token_authenticate(raw=raw) if raw and " " not in raw and len(raw) <= 200 else None
        if token is None:
            # add() starts the window; incr() fails when it has just expired, which restarts it.
            if not cache.add(failures_key, 1, FAILURE_WINDOW_SECONDS):
                try:
                    cache.incr(failures_key)
                except ValueError:
                    cache.add(failures_key, 1, FAILURE_WINDOW_SECONDS)
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


def request_token(request: Request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None
