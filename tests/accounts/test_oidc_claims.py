"""Claim mapping and the sign-in policy of accounts.oidc, without a provider (fast): what the
groups claim does to memberships and staff status, who may sign in, which email links an account.
The whole flow against a real provider is tests/e2e/browser/test_sso.py."""

from __future__ import annotations

import pytest
from allauth.socialaccount.models import SocialAccount, SocialLogin
from django.contrib.auth.models import Group, User
from django.test import Client

from accounts.backends import SuperuserPasswordBackend
from accounts.models import ManagedGroup
from accounts.oidc.adapter import PortalSocialAccountAdapter
from accounts.oidc.claims import claim_email_verified, claim_groups, claims_merged, sign_in_refusal
from accounts.oidc.groups import user_groups_sync, user_staff_sync


@pytest.mark.parametrize(("claims", "expected"), [
    ({"groups": ["a", "b"]}, {"a", "b"}),
    ({"groups": "solo"}, {"solo"}),
    ({"groups": []}, set()),
    ({"groups": None}, set()),
    ({}, set()),
    ({"groups": ["a", 7, None, " ", {"x": 1}, " b "]}, {"a", "b"}),
    ({"groups": {"a": True}}, set()),
], ids=["list", "string", "empty", "null", "absent", "junk-entries", "object"])
def test_claim_groups(claims, expected):
    assert claim_groups(claims, "groups") == expected


def test_a_dotted_claim_reads_a_nested_one():
    assert claim_groups({"realm_access": {"roles": ["r1", "r2"]}}, "realm_access.roles") == {"r1", "r2"}
    assert claim_groups({"realm_access": ["r1"]}, "realm_access.roles") == set()


def test_userinfo_claims_override_the_id_tokens():
    extra = {
        "id_token": {"sub": "1", "groups": ["old"], "iss": "x"},
        "userinfo": {"sub": "1", "groups": ["new"]},
    }
    assert claims_merged(extra) == {"sub": "1", "groups": ["new"], "iss": "x"}
    assert claims_merged({"sub": "1", "groups": ["flat"]})["groups"] == ["flat"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), ("False", False), (None, None), ("yes", None), (1, None)],
)
def test_email_verified(value, expected):
    claims = {} if value is None else {"email_verified": value}
    assert claim_email_verified(claims) is expected


def test_sign_in_refusals():
    policy = {"allowed_domains": ["example.com"], "blocked_groups": ["contractors"], "groups_claim": "groups"}
    assert sign_in_refusal({"email": "a@Example.COM", "groups": ["staff"]}, **policy) is None
    assert "example.org" in sign_in_refusal({"email": "a@example.org"}, **policy)
    assert "no email" in sign_in_refusal({}, **policy)
    assert "contractors" in sign_in_refusal({"email": "a@example.com", "groups": ["contractors"]}, **policy)
    assert sign_in_refusal({}, allowed_domains=[], blocked_groups=[], groups_claim="groups") is None


def _managed(name: str) -> Group:
    group = Group.objects.create(name=name)
    ManagedGroup.objects.create(group=group)
    return group


def _names(user: User) -> list[str]:
    return sorted(user.groups.values_list("name", flat=True))


@pytest.mark.django_db
def test_sync_creates_joins_and_leaves_only_managed_groups():
    user = User.objects.create_user("dana")
    hand_made = Group.objects.create(name="hand-made")
    also_hand_made = Group.objects.create(name="named-in-claim")
    old = _managed("old-team")
    user.groups.add(hand_made, old)

    sync = user_groups_sync(user=user, names={"research", "named-in-claim"}, create=True)
    assert sync.added == ["research"] and sync.removed == ["old-team"] and sync.ignored == ["named-in-claim"]
    assert _names(user) == ["hand-made", "research"]
    assert ManagedGroup.objects.filter(group__name="research").exists()
    assert not also_hand_made.user_set.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "names", [set(), {"unknown-without-create"}], ids=["claim-absent-or-empty", "not-created"]
)
def test_the_last_managed_group_goes_when_the_claim_no_longer_lists_it(names):
    user = User.objects.create_user("dana")
    hand_made = Group.objects.create(name="hand-made")
    user.groups.add(_managed("research"), hand_made)
    user_groups_sync(user=user, names=names, create=False)
    assert _names(user) == ["hand-made"]
    assert not Group.objects.filter(name="unknown-without-create").exists()


@pytest.mark.django_db
def test_staff_follows_the_admin_groups_but_never_demotes_a_superuser():
    user = User.objects.create_user("dana")
    assert user_staff_sync(user=user, names={"portal-admins"}, admin_groups=["portal-admins"])
    assert User.objects.get(pk=user.pk).is_staff
    assert user_staff_sync(user=user, names={"research"}, admin_groups=["portal-admins"])
    assert not User.objects.get(pk=user.pk).is_staff
    root = User.objects.create_superuser("root", password="root-password-1")
    assert not user_staff_sync(user=root, names=set(), admin_groups=["portal-admins"])
    assert User.objects.get(pk=root.pk).is_staff
    hand_staff = User.objects.create_user("hand", is_staff=True)
    assert not user_staff_sync(user=hand_staff, names=set(), admin_groups=[])  # no admin groups: untouched


def _login(**claims) -> SocialLogin:
    return SocialLogin(account=SocialAccount(provider="sso", uid=claims.get("sub", "x"),
                                             extra_data={"userinfo": claims}))


@pytest.mark.django_db
def test_email_links_a_local_account_only_when_verified_or_trusted(settings):
    settings.OIDC_TRUST_EMAIL = False
    local = User.objects.create_user("erin", email="Erin@example.com")
    User.objects.create_superuser("root", email="root@example.com", password="root-password-1")
    adapter = PortalSocialAccountAdapter()
    assert adapter.authenticate_by_email(_login(email="erin@example.com", email_verified=True)) == \
        (local, "erin@example.com")
    assert adapter.authenticate_by_email(_login(email="erin@example.com", email_verified=False)) is None
    assert adapter.authenticate_by_email(_login(email="erin@example.com")) is None
    assert adapter.authenticate_by_email(_login(email="root@example.com", email_verified=True)) is None
    settings.OIDC_TRUST_EMAIL = True
    assert adapter.authenticate_by_email(_login(email="erin@example.com")) == (local, "erin@example.com")
    assert adapter.authenticate_by_email(_login(email="erin@example.com", email_verified=False)) is None


@pytest.mark.django_db
def test_local_login_off_leaves_passwords_to_superusers():
    User.objects.create_user("dana", password="dana-password-1")
    root = User.objects.create_superuser("root", password="root-password-1")
    backend = SuperuserPasswordBackend()
    assert backend.authenticate(None, username="dana", password="dana-password-1") is None
    assert backend.authenticate(None, username="root", password="root-password-1") == root


@pytest.mark.django_db
def test_the_login_page_offers_the_provider_only_when_configured(settings):
    assert "Sign in with" not in Client().get("/accounts/login/").content.decode()
    settings.OIDC_ENABLED, settings.OIDC_PROVIDER_NAME = True, "Acme SSO"
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with Acme SSO" in page and 'action="/accounts/oidc/sso/login/"' in page


@pytest.mark.django_db
def test_the_admin_shows_provider_identities_and_managed_groups(staff):
    dana = User.objects.create_user("dana")
    SocialAccount.objects.create(user=dana, provider="sso", uid="sub-dana-42", extra_data={})
    _managed("research")
    Group.objects.create(name="hand-made")
    client = Client()
    client.force_login(staff)
    users = client.get("/admin/auth/user/").content.decode().lower()
    assert "last sign-in through the provider" in users
    assert "sub-dana-42" in client.get(f"/admin/auth/user/{dana.pk}/change/").content.decode()
    groups = client.get("/admin/auth/group/").content.decode().lower()
    assert "managed by the identity provider" in groups
    assert groups.count('alt="true"') == 1 and groups.count('alt="false"') == 1
