"""Websocket safety shared by the chat and build-progress sockets.

* `SameOriginValidator`: a browser opening a socket sends `Origin`; it must be this site itself
  (scheme, host *and* port of the request's `Host`), or one of `CSRF_TRUSTED_ORIGINS`. Channels'
  `AllowedHostsOriginValidator` compares host names only, so a page on another port of the same
  machine could open sockets with the user's cookies.
* Logout ends sockets: `session_user_is_current` re-reads the session (the chat checks it per frame)
  and `user_logged_out` tells the sockets of that session, through the channel layer, to close.
  Deactivating a person (`user_sockets_close`, on every save of an inactive user) tells all their
  sockets to close; the chat's per-frame check refuses their next frame either way.
"""

from __future__ import annotations

import hashlib
import logging
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from django.http.request import split_domain_port, validate_host
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)
_DEFAULT_PORTS = {"http": 80, "https": 443}
CLOSE_LOGGED_OUT = 4401


def _origin_key(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the scheme's default port filled in; None when unparsable."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[parts.scheme]


def _headers(scope: dict[str, Any]) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


def _request_scheme(scope: dict[str, Any], headers: dict[bytes, bytes]) -> str:
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        # "HTTP_X_FORWARDED_PROTO" -> b"x-forwarded-proto", as Django's request.scheme reads it.
        name = proxy_header[0].removeprefix("HTTP_").lower().replace("_", "-").encode()
        forwarded = headers.get(name, b"").decode("latin1").split(",")[0].strip()
        if forwarded:
            return "https" if forwarded == proxy_header[1] else "http"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def origin_allowed(scope: dict[str, Any]) -> bool:
    """True when the handshake's Origin is this site (same scheme, host and port as the request,
    on an allowed host) or a trusted origin."""
    headers = _headers(scope)
    origin = _origin_key(headers.get(b"origin", b"").decode("latin1"))
    if origin is None:
        return False
    if any(_origin_key(trusted) == origin for trusted in settings.CSRF_TRUSTED_ORIGINS):
        return True
    host = headers.get(b"host", b"").decode("latin1")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    return _origin_key(f"{_request_scheme(scope, headers)}://{host}") == origin


class SameOriginValidator:
    """ASGI middleware for websocket scopes: refuses the handshake (HTTP 403) of a foreign origin."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        logger.info("websocket %s refused: origin %r is not this site", scope.get("path"),
                    _headers(scope).get(b"origin", b"").decode("latin1"))
        return await WebsocketDenier()(scope, receive, send)


def session_user_is_current(*, scope: dict[str, Any]) -> bool:
    """The socket's user is still the one its session logs in (not logged out, password unchanged).
    Reads the session afresh: the scope's copy was loaded at the handshake."""
    user = scope.get("user")
    session = scope.get("session")
    if user is None or not user.is_authenticated or session is None or not session.session_key:
        return False
    fresh = import_string(settings.SESSION_ENGINE).SessionStore(session_key=session.session_key)
    return get_user(SimpleNamespace(session=fresh)).pk == user.pk


def session_group(session_key: str) -> str:
    """The channel-layer group of one login session's sockets (a hash: group names are public)."""
    return "session-" + hashlib.sha256(session_key.encode()).hexdigest()[:32]


def user_group(user_id: int) -> str:
    """The channel-layer group of all of one person's sockets (every session)."""
    return f"user-{user_id}"


def _sockets_end(group: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": "session.ended"})
    except Exception:  # noqa: BLE001 - the logout itself must succeed; the chat still checks per frame
        logger.warning("could not tell the sockets of %s to close", group, exc_info=True)


def user_sockets_close(*, user_id: int) -> None:
    """Close every socket of a person who may no longer sign in (deactivated)."""
    _sockets_end(user_group(user_id))


@receiver(user_logged_out)
def close_sockets_on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        _sockets_end(session_group(session_key))
