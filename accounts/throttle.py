"""The one throttle for every credential check: the login form, the API's bearer tokens, and the
body-limit layer's look at a token all count their failures here and are refused here.

Two limits, both counted in django-axes' access attempts (so the admin's *Axes → Access attempts*,
`manage.py axes_reset_username NAME` and `axes_reset_ip ADDRESS` unlock both), both for
`LOGIN_LOCKOUT_MINUTES` after the last counted failure:

* an account: `AXES_FAILURE_LIMIT` (`LOGIN_FAILURE_LIMIT`, 10) failures for one account, from
  any address, lock that account;
* an address: `LOGIN_ADDRESS_FAILURE_LIMIT` (50) failures from one client address, across all
  accounts and tokens, lock that address (credential stuffing): every login from it, and every
  wrong token (a right one cannot have been guessed, see `random_secret_check`).

A refused check is not counted, so one account adds at most its own limit to its address's count:
locking an address takes failures for several accounts, and one person's typos (or one script's
revoked token) lock only that account (or that token), never the colleagues behind the same NAT or
proxy. A failed token names no account; it counts as the account `(API token <hash>)` of the
string presented, so repeating one wrong token locks that string, and guessing many counts
against the address.

The login form reaches this module through axes' authentication backend (`AXES_HANDLER` is
`AddressLimitHandler`); API tokens through `random_secret_check`.

The client address is `REMOTE_ADDR`; only for a request from one of `TRUSTED_PROXIES` is it taken
from `X-Forwarded-For` (see `client_address`): any other client can write that header.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import cache
from typing import TypeVar

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_credentials
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.db.models import Sum
from django.http import HttpRequest

from core.cache import function_cache_register
from core.errors import CredentialsLockedOut

Checked = TypeVar("Checked")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@function_cache_register
@cache
def _networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


def _parsed(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address.strip())
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    """The client's address: `REMOTE_ADDR`, or, while that is a trusted proxy, the address it
    forwarded for: `X-Forwarded-For` read from the right (each proxy appends the address it was
    connected from), stopping at the first address that is not a trusted proxy. Entries left of
    that one were written by the client and are ignored. None without a valid `REMOTE_ADDR`."""
    address = _parsed(request.META.get("REMOTE_ADDR") or "")
    trusted = _networks(tuple(settings.TRUSTED_PROXIES))
    hops = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if trusted else []
    for hop in reversed(hops):
        forwarded = _parsed(hop)
        if address is None or forwarded is None or not any(address in network for network in trusted):
            break
        address = forwarded
    return None if address is None else str(address)


def address_failures(request: HttpRequest) -> int:
    """Failed credential checks from the request's client address within the lockout time."""
    AxesProxyHandler.update_request(request)
    attempts = AccessAttempt.objects.filter(ip_address=request.axes_ip_address,
                                            attempt_time__gte=get_cool_off_threshold(request))
    return attempts.aggregate(failures=Sum("failures_since_start"))["failures"] or 0


class AddressLimitHandler(AxesDatabaseHandler):
    """axes' database handler, which locks an account (`AXES_LOCKOUT_PARAMETERS`), with the
    second, higher limit for an address: one setting (`AXES_FAILURE_LIMIT`) cannot say both."""

    def is_locked(self, request: HttpRequest, credentials: dict | None = None) -> bool:
        return (super().is_locked(request, credentials)
                or address_failures(request) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT)


def random_secret_check(*, request: HttpRequest, account: str,
                        check: Callable[[], Checked | None]) -> Checked | None:
    """Run `check` (the lookup of a random secret, such as an API token: what it admits, or None)
    through the throttle.

    A right secret is admitted without a look at the counts: it cannot have been guessed (256
    random bits), and looking costs two queries on every API request. A wrong one raises
    `CredentialsLockedOut` while `account` or the client address is locked out, and when it
    reaches the account's limit (as the login form answers its lockout page at once); any other
    is counted and returned (None). A password can be guessed, so it must be refused before it is
    checked: the login form's is, by axes' backend."""
    admitted = check()
    if admitted is not None:
        return admitted
    credentials = get_credentials(account)
    if not AxesProxyHandler.is_allowed(request, credentials):
        raise CredentialsLockedOut
    user_login_failed.send(sender=__name__, credentials=credentials, request=request)
    if request.axes_locked_out:
        # axes marks the request for its middleware, which would answer the login form's HTML
        # lockout page; the caller answers in its own shape (the API's JSON error).
        request.axes_locked_out = False
        raise CredentialsLockedOut
    return None
