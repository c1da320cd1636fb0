"""Requests per token (per user for browser sessions, per address without either), with
Retry-After on 429. The rate is `API_THROTTLE_RATE` ("600/min"), read on each request."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from accounts.throttle import client_address
from api.authentication import request_token


class TokenRateThrottle(SimpleRateThrottle):
    scope = "api"

    def get_rate(self) -> str | None:
        return settings.API_THROTTLE_RATE or None

    def allow_request(self, request: Request, view: Any) -> bool:
        # The rate may change at run time (tests, settings reload); DRF parses it in __init__.
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Request, view: Any) -> str:
        token = request_token(request)
        if token is not None:
            ident = f"token-{token.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"addr-{client_address(request)}"
        return f"throttle_{self.scope}_{ident}"
