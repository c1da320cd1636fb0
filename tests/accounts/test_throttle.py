"""Login throttling (accounts.throttle over django-axes) through the real login page: an account
is locked from everywhere, an address only for failures across many accounts, the address is
taken from X-Forwarded-For only from a trusted proxy; a clear page, an admin unlock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from axes.models import AccessAttempt
from django.test import Client

from accounts.throttle import client_address
from tests.plugins.portal import PASSWORD, login

LOGIN = "/accounts/login/"


@pytest.fixture(autouse=True)
def fast_hashing(settings) -> None:
    """A failed login for an unknown name still hashes (timing); the spraying tests make dozens."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                                 "django.contrib.auth.hashers.PBKDF2PasswordHasher"]


def _attempt(username: str, password: str, address: str = "10.0.0.1", **headers: str):  # noqa: ANN202
    client = Client()
    response = client.post(
        LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address, **headers
    )
    return response, client


def _spray(count: int, address: str, **headers: str) -> None:
    """`count` wrong passwords from one address, each for another account."""
    for i in range(count):
        assert _attempt(f"guess-{address}-{i}", "wrong", address, **headers)[0].status_code == 200


def _logged_in(client: Client) -> bool:
    return client.get("/corpora/").status_code == 200


def test_thirty_wrong_passwords_then_the_right_one_is_refused(owner, settings):
    statuses = [_attempt("owner", f"wrong-{i}")[0].status_code for i in range(30)]
    assert statuses[:settings.AXES_FAILURE_LIMIT - 1] == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    assert set(statuses[settings.AXES_FAILURE_LIMIT:]) == {429}
    response, client = _attempt("owner", PASSWORD)
    assert response.status_code == 429 and not _logged_in(client)
    page = response.content.decode()
    assert "Too many failed logins" in page and "owner" in page and "administrator can unlock" in page


def test_an_account_is_locked_from_every_address(owner, settings):
    for i in range(settings.AXES_FAILURE_LIMIT):
        _attempt("owner", "wrong", address=f"10.0.1.{i}")
    response, client = _attempt("owner", PASSWORD, address="10.0.2.1")
    assert response.status_code == 429 and not _logged_in(client)


def test_one_account_s_lockout_leaves_a_colleague_at_the_same_address_able_to_log_in(
    owner, outsider, settings
):
    for _ in range(3 * settings.AXES_FAILURE_LIMIT):
        _attempt("owner", "wrong", address="10.0.3.1")
    assert _attempt("owner", PASSWORD, address="10.0.3.1")[0].status_code == 429
    response, client = _attempt("outsider", PASSWORD, address="10.0.3.1")
    assert response.status_code == 302 and _logged_in(client)


def test_spraying_many_accounts_from_one_address_is_stopped(outsider, settings):
    assert settings.LOGIN_ADDRESS_FAILURE_LIMIT >= 5 * settings.AXES_FAILURE_LIMIT
    _spray(settings.LOGIN_ADDRESS_FAILURE_LIMIT - 1, "10.0.3.5")
    # Up to the address's limit, a colleague there is not punished for it...
    response, client = _attempt("outsider", PASSWORD, address="10.0.3.5")
    assert response.status_code == 302 and _logged_in(client)
    _attempt("guess-last", "wrong", address="10.0.3.5")
    # ...at it, every login from that address is refused, with the page that says so.
    response, client = _attempt("outsider", PASSWORD, address="10.0.3.5")
    assert response.status_code == 429 and not _logged_in(client)
    assert "many accounts from your address" in response.content.decode()
    # Another address is not.
    response, client = _attempt("outsider", PASSWORD, address="10.0.3.6")
    assert response.status_code == 302 and _logged_in(client)


def test_a_forged_x_forwarded_for_changes_nothing_without_a_trusted_proxy(outsider, settings):
    assert settings.TRUSTED_PROXIES == []
    for i in range(settings.LOGIN_ADDRESS_FAILURE_LIMIT):
        _attempt(f"guess-{i}", "wrong", "10.0.4.1", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"10.0.4.1"}
    response, _ = _attempt("outsider", PASSWORD, "10.0.4.1", HTTP_X_FORWARDED_FOR="198.51.100.200")
    assert response.status_code == 429


def test_behind_a_trusted_proxy_each_client_has_its_own_address(outsider, settings):
    settings.TRUSTED_PROXIES = ["10.0.5.0/24"]
    # The proxy appends the address it was connected from; what the client wrote before it is ignored.
    _spray(settings.LOGIN_ADDRESS_FAILURE_LIMIT, "10.0.5.1", HTTP_X_FORWARDED_FOR="192.0.2.9, 203.0.113.7")
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.7"}
    response, _ = _attempt("outsider", PASSWORD, "10.0.5.2", HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert response.status_code == 429
    response, client = _attempt("outsider", PASSWORD, "10.0.5.1", HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert response.status_code == 302 and _logged_in(client)


@pytest.mark.parametrize(("remote", "forwarded", "trusted", "expected"), [
    ("10.0.0.2", "203.0.113.7", [], "10.0.0.2"),
    ("10.0.0.2", "203.0.113.7", ["10.0.0.9"], "10.0.0.2"),  # not from a trusted proxy
    ("10.0.0.2", "203.0.113.7", ["10.0.0.2"], "203.0.113.7"),
    ("10.0.0.2", "1.1.1.1, 203.0.113.7, 10.0.0.3", ["10.0.0.0/24"], "203.0.113.7"),  # two proxies
    ("10.0.0.2", "10.0.0.4, 10.0.0.3", ["10.0.0.0/24"], "10.0.0.4"),  # all trusted: the left-most
    ("10.0.0.2", "", ["10.0.0.0/24"], "10.0.0.2"),
    ("10.0.0.2", "not-an-address, 10.0.0.3", ["10.0.0.0/24"], "10.0.0.3"),  # stop at garbage
    ("::1", " 2001:db8::7 ", ["::1"], "2001:db8::7"),
    ("", "203.0.113.7", ["10.0.0.0/8"], None),
])
def test_client_address(settings, remote, forwarded, trusted, expected):
    settings.TRUSTED_PROXIES = trusted
    assert (
        client_address(SimpleNamespace(META={"REMOTE_ADDR": remote, "HTTP_X_FORWARDED_FOR": forwarded}))
        == expected
    )


def test_a_right_password_before_the_limit_resets_the_count(owner, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _attempt("owner", "wrong")
    assert _attempt("owner", PASSWORD)[0].status_code == 302
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _attempt("owner", "wrong")
    assert _attempt("owner", PASSWORD)[0].status_code == 302


def test_staff_unlock_in_the_admin(owner, staff, member, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _attempt("owner", "wrong")
    assert _attempt("owner", PASSWORD)[0].status_code == 429
    admin = login(staff)
    changelist = admin.get("/admin/axes/accessattempt/")
    assert changelist.status_code == 200 and "owner" in changelist.content.decode()
    assert login(member).get("/admin/axes/accessattempt/").status_code == 302  # not staff: to the admin login
    attempts = list(AccessAttempt.objects.values_list("pk", flat=True))
    response = admin.post(
        "/admin/axes/accessattempt/",
        {"action": "delete_selected", "_selected_action": attempts, "post": "yes"},
    )
    assert response.status_code == 302 and not AccessAttempt.objects.exists()
    response, client = _attempt("owner", PASSWORD)
    assert response.status_code == 302 and _logged_in(client)
