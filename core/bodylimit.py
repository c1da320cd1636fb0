"""ASGI middleware in front of Django that bounds every HTTP request body.

Django's ASGI handler reads the whole body (spooling it to a temporary file) before any view,
upload handler or login check runs, so a limit there comes too late: memory or disk has already
paid for the body. This middleware answers 413 at once when `Content-Length` is over the limit, and
otherwise counts the bytes as they stream in and cuts the request off at the limit (a chunked body
has no length to check). With a server that streams bodies (Uvicorn), nothing more than one
chunk of an oversized body is ever held.

Limits:
* `REQUEST_MAX_BYTES` (default 2.5 MiB, like Django's form limit) for every request;
* `UPLOAD_MAX_BYTES` (+ 1 MiB for the multipart envelope) on the upload paths
  (`UPLOAD_PATH_PATTERN`), only for a request that declares its length and logs in a user: its
  session, or its `Authorization` header as one of the registered credential checks accepts (the
  API's tokens: `api` registers its check when it starts, so this layer names no app). An anonymous client
  cannot make the server store more than `REQUEST_MAX_BYTES`.

A token checked here goes through the credential throttle (`accounts.throttle`) like any other:
a wrong one is counted, and while the token or the client address is locked out the answer is 429.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import cache
from types import SimpleNamespace
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from django.utils.module_loading import import_string

from core.cache import function_cache_register
from core.errors import CredentialsLockedOut

logger = logging.getLogger(__name__)
MULTIPART_ENVELOPE_BYTES = 1024 * 1024

# A function of a request (without its body) and its Authorization header: the credential it names
# (truthy) or None; it may raise CredentialsLockedOut.
CredentialCheck = Callable[..., object]
_credential_checks: list[CredentialCheck] = []


def body_limit_credential_check_register(check: CredentialCheck) -> None:
    """Let a request whose `Authorization` header `check` accepts send an upload-sized body. An app
    registers its tokens' check from its `AppConfig.ready`; registering one twice adds it once."""
    if check not in _credential_checks:
        _credential_checks.append(check)


@function_cache_register
@cache
def _upload_paths(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _session_logs_in(cookie_header: str) -> bool:
    session_key = parse_cookie(cookie_header).get(settings.SESSION_COOKIE_NAME)
    if not session_key:
        return False
    store = import_string(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    return get_user(SimpleNamespace(session=store)).is_authenticated


def _credential_request(scope: dict[str, Any]) -> HttpRequest:
    """What the credential throttle needs of the request (address, forwarding, agent), without its
    body: a Django request built here cannot read it, so counting a failure cannot either."""
    request = HttpRequest()
    request.method = scope.get("method")
    request.path = request.path_info = scope.get("path", "")
    request.META = {"REMOTE_ADDR": (scope.get("client") or ("",))[0], "PATH_INFO": request.path,
                    "REQUEST_METHOD": request.method}
    for name, value in scope.get("headers", []):
        key = "HTTP_" + name.decode("latin1").upper().replace("-", "_")
        if key in ("HTTP_X_FORWARDED_FOR", "HTTP_USER_AGENT", "HTTP_ACCEPT"):
            value = value.decode("latin1")
            # Repeated headers are one list, as Django's own ASGI request joins them.
            request.META[key] = f"{request.META[key]},{value}" if key in request.META else value
    return request


def _logs_in(scope: dict[str, Any], cookie_header: str, authorization: str) -> bool:
    """Raises CredentialsLockedOut while the token presented or the client address is locked out."""
    if authorization:
        request = _credential_request(scope)
        if any(check(request=request, authorization=authorization) for check in _credential_checks):
            return True
    return _session_logs_in(cookie_header)


def _size(limit: int) -> str:
    return f"{limit / 1024 ** 2:g} MiB" if limit >= 1024 ** 2 else f"{limit / 1024:g} KiB"


class BodyLimitMiddleware:
    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "http":
            return await self.application(scope, receive, send)
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        try:
            declared = int(headers[b"content-length"]) if b"content-length" in headers else None
        except ValueError:
            return await _answer(send, 400, "The Content-Length header is not a number.")
        limit = settings.REQUEST_MAX_BYTES
        if (declared is not None and declared > limit
                and _upload_paths(settings.UPLOAD_PATH_PATTERN).fullmatch(scope.get("path", ""))):
            try:
                logs_in = await database_sync_to_async(_logs_in)(
                    scope, headers.get(b"cookie", b"").decode("latin1"),
                    headers.get(b"authorization", b"").decode("latin1"))
            except CredentialsLockedOut as locked:
                return await _answer(send, 429, str(locked), retry_after=locked.retry_after)
            if logs_in:
                limit = settings.UPLOAD_MAX_BYTES + MULTIPART_ENVELOPE_BYTES
        if declared is not None and declared > limit:
            return await _too_large(scope, send, limit)

        received = 0
        exceeded = started = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django reads a disconnect as an aborted request and answers nothing; the
                    # 413 is sent below, and the server drops the rest of the body.
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: dict[str, Any]) -> None:
            nonlocal started
            if exceeded and not started:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.application(scope, limited_receive, tracked_send)
        if exceeded and not started:
            await _too_large(scope, send, limit)


async def _too_large(scope: dict[str, Any], send: Any, limit: int) -> None:
    logger.warning("413 for %s %s from %s: body over %d bytes", scope.get("method"), scope.get("path"),
                   (scope.get("client") or ("?",))[0], limit)
    await _answer(send, 413, f"The request body is larger than the limit of {_size(limit)}.")


async def _answer(send: Any, status: int, message: str, *, retry_after: int | None = None) -> None:
    body = message.encode()
    # Connection: close tells the server not to wait for (or read) the rest of the body.
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
