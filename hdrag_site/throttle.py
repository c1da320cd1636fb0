"""Login throttling for credentials checked outside Django's login form (the REST API's tokens).

The login form is throttled by django-axes as configured in settings (per account and per client
address, `LOGIN_FAILURE_LIMIT` failures, `LOGIN_LOCKOUT_MINUTES`). Code that checks other
credentials uses these two functions, so the same counters and the same admin unlock apply:

    if auth_locked_out(request=request, username=name):
        raise Throttled(...)                       # the API answers 429
    if not token_is_valid(...):
        auth_failure_record(request=request, username=name)
        raise AuthenticationFailed(...)

`username` is the account the client claims, when it names one (a token alone names none: then
only the client address is counted).
"""

from __future__ import annotations

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_ip_address
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest


def _credentials(request: HttpRequest, username: str) -> dict[str, str]:
    # Axes counts "username" failures by name, and an unnamed one as the name None, which every
    # unnamed failure from everywhere would share: one client could lock out all token users.
    # An unnamed failure is therefore named after its address (the address criterion, again).
    return {"username": username or f"(no account) {get_client_ip_address(request)}"}


def auth_failure_record(*, request: HttpRequest, username: str = "") -> None:
    """Count one failed credential check against the client address (and the account, if named)."""
    user_login_failed.send(sender=__name__, credentials=_credentials(request, username), request=request)


def auth_locked_out(*, request: HttpRequest, username: str = "") -> bool:
    """True while the client address (or the named account) is locked out."""
    return not AxesProxyHandler.is_allowed(request, credentials=_credentials(request, username))
