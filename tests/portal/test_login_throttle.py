"""Login throttling (django-axes) through the real login page: per account and per client address,
a clear page, an admin unlock; and the helpers the API's token authentication uses."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from axes.models import AccessAttempt
from django.test import Client

from hdrag_site.throttle import auth_failure_record, auth_locked_out
from tests.portal.conftest import PASSWORD, login

LOGIN = "/accounts/login/"


def _attempt(username: str, password: str, address: str = "10.0.0.1"):  # noqa: ANN202 - HttpResponse
    client = Client()
    response = client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)
    return response, client


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


def test_an_address_is_locked_for_every_account(owner, outsider, settings):
    for i in range(settings.AXES_FAILURE_LIMIT):
        _attempt(f"guess-{i}", "wrong", address="10.0.3.1")
    response, client = _attempt("outsider", PASSWORD, address="10.0.3.1")
    assert response.status_code == 429 and not _logged_in(client)
    # Another address and another account are not punished for it.
    response, client = _attempt("outsider", PASSWORD, address="10.0.3.2")
    assert response.status_code == 302 and _logged_in(client)


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
    response = admin.post("/admin/axes/accessattempt/", {"action": "delete_selected", "_selected_action": attempts,
                                                         "post": "yes"})
    assert response.status_code == 302 and not AccessAttempt.objects.exists()
    response, client = _attempt("owner", PASSWORD)
    assert response.status_code == 302 and _logged_in(client)


@pytest.mark.django_db
def test_token_auth_helpers_count_failures_per_address_and_account(settings):
    request = SimpleNamespace(META={"REMOTE_ADDR": "10.0.4.1", "HTTP_USER_AGENT": "api-client"}, path="/api/",
                              method="POST", GET={}, POST={})
    other = SimpleNamespace(META={"REMOTE_ADDR": "10.0.4.2", "HTTP_USER_AGENT": "api-client"}, path="/api/",
                            method="POST", GET={}, POST={})
    assert not auth_locked_out(request=request)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        auth_failure_record(request=request)
    assert auth_locked_out(request=request)
    assert not auth_locked_out(request=other)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        auth_failure_record(request=other, username="owner")
    assert auth_locked_out(request=SimpleNamespace(**{**vars(other), "META": {"REMOTE_ADDR": "10.0.4.3"}}),
                           username="owner")
