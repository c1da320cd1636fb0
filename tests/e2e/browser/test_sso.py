"""Signing in through a real OpenID Connect provider (tests/plugins/oidc.py: panva's oidc-provider,
PKCE required) in Debian's chromium, against a live portal configured by the OIDC_* variables.

The portal here is its own small stack (Uvicorn on SQLite in a temporary DATA_DIR, no worker and no
LLM: sign-in, pages, the API and the build-progress socket need neither), on the port the provider's
client was registered for."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.browser.conftest import BUSY_MACHINE_SECONDS, PASSWORD, ROOT, LivePortal, _wait_for
from tests.plugins.oidc import CALLBACK_PATH, OidcProvider

IDP_PASSWORD = "idp-password-1"
SETUP = """
import json, os
from django.contrib.auth.models import Group, User
from accounts.models import ManagedGroup
from corpus.services.corpora import corpus_create
owner = User.objects.create_user("owner", password=os.environ["PASSWORD"])
User.objects.create_user("erin", email="erin@example.com", password=os.environ["PASSWORD"])
User.objects.create_user("frank", email="frank@example.com", password=os.environ["PASSWORD"])
research = Group.objects.create(name="research")
ManagedGroup.objects.create(group=research)
corpus_create(owner=owner, name="Research notes", visibility="groups", readable_groups=[research])
corpus_create(owner=owner, name="Owner private notes", visibility="private")
"""


@pytest.fixture(scope="module")
def sso_portal(oidc_provider: OidcProvider) -> Iterator[LivePortal]:
    root = Path(tempfile.mkdtemp(prefix="hdrag-sso-"))
    data_dir, log_dir = root / "data", root / "log"
    log_dir.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "CHROMA_URL") and not key.startswith("OIDC_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
            "HDRAG_ENV": "development",
            "DATA_DIR": str(data_dir),
            "LLM_BASE_URL": "http://127.0.0.1:9",
            "PYTHONPATH": str(ROOT),
            "INDEX_ON_UPLOAD": "0",
            **oidc_provider.portal_env(OIDC_BLOCKED_GROUPS="contractors", OIDC_ADMIN_GROUPS="portal-admins"),
        }
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    portal = LivePortal(oidc_provider.portal_url, data_dir, log_dir, env)
    portal.shell(SETUP, PASSWORD=PASSWORD)
    port = oidc_provider.portal_url.rsplit(":", 1)[1]
    with open(log_dir / "web.log", "wb") as log:
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "hdrag_site.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                port,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            _wait_for(f"{portal.url}/healthz", BUSY_MACHINE_SECONDS, [web])
        except (RuntimeError, TimeoutError) as error:
            pytest.fail(f"the live portal did not start: {error}\n{portal.logs()}", pytrace=False)
        yield portal
    finally:
        if web.poll() is None:
            os.killpg(web.pid, signal.SIGTERM)
        web.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _context(browser):  # noqa: ANN001, ANN202 - playwright objects
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(BUSY_MACHINE_SECONDS * 1000)
    return context


def _sign_in(page, portal: LivePortal, oidc: OidcProvider, username: str) -> None:  # noqa: ANN001
    """From the portal's login page through the provider's: click the button, sign in there."""
    page.goto(f"{portal.url}/accounts/login/")
    page.get_by_role("button", name="Sign in with Test IdP").click()
    page.wait_for_url(re.compile(re.escape(oidc.issuer) + r"/interaction/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(IDP_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def _shell_value(portal: LivePortal, expression: str, **variables: object) -> str:
    return portal.shell(f"import json, os\nfrom django.contrib.auth.models import User\n"
                        f"from allauth.socialaccount.models import SocialAccount\nprint({expression})",
                        **variables).strip()


def test_groups_from_the_claim_open_and_close_a_corpus_and_logout_ends_the_provider_session(
        browser, sso_portal: LivePortal, oidc_provider: OidcProvider, screenshot) -> None:  # noqa: ANN001
    oidc_provider.set_user("dana", password=IDP_PASSWORD, email="dana@example.com", email_verified=True,
                           groups=["research", "reading-club"])
    context = _context(browser)
    page = context.new_page()
    callbacks: list[str] = []
    authorizations: list[str] = []
    page.on(
        "request", lambda request: callbacks.append(request.url) if CALLBACK_PATH in request.url else None
    )
    page.on("request", lambda request: authorizations.append(request.url)
            if request.url.startswith(f"{oidc_provider.issuer}/auth?") else None)
    _sign_in(page, sso_portal, oidc_provider, "dana")
    page.wait_for_url(f"{sso_portal.url}/")
    screenshot(page, "sso-dashboard")
    assert page.get_by_text("Research notes").count() > 0
    assert page.get_by_text("Owner private notes").count() == 0
    # PKCE (the provider requires it, and would refuse the code without its verifier); groups synced.
    assert "code_challenge_method=S256" in authorizations[0] and "code_challenge=" in authorizations[0]
    assert (
        _shell_value(
            sso_portal, "sorted(User.objects.get(username='dana').groups.values_list('name', flat=True))"
        )
        == "['reading-club', 'research']"
    )

    # The same in the API (the browser's session) and on the build-progress websocket.
    api = page.evaluate("async () => (await (await fetch('/api/v1/corpora/')).json())")
    names = [corpus["name"] for corpus in api["results"]]
    assert "Research notes" in names and "Owner private notes" not in names
    ids = {
        name: int(value)
        for name, value in (
            line.split("=")
            for line in _shell_value(
                sso_portal,
                "'\\n'.join(f'{c.name}={c.pk}' for c in "
                "__import__('corpus.models').models.Corpus.objects.all())",
            ).splitlines()
        )
    }
    socket_codes = page.evaluate("""async (ids) => Promise.all(ids.map((id) => new Promise((resolve) => {
        const socket = new WebSocket(`ws://${location.host}/ws/corpora/${id}/builds/`);
        const timer = setTimeout(() => { socket.close(); resolve("open"); }, 1500);
        socket.onclose = (event) => { clearTimeout(timer); resolve(event.code); };
    })))""", [ids["Research notes"], ids["Owner private notes"]])
    assert socket_codes == ["open", 4404]
    assert page.request.get(f"{sso_portal.url}/corpora/{ids['Research notes']}/").status == 200
    assert page.request.get(f"{sso_portal.url}/corpora/{ids['Owner private notes']}/").status == 404

    # A replayed callback (its code and state used once already) is refused with a page, not a 500.
    replay = page.goto(callbacks[0])
    assert replay.status < 500
    assert page.get_by_role("heading", name="Sign-in failed").is_visible()

    # Logout ends the portal session and reaches the provider's end-session page with the ID token.
    page.goto(f"{sso_portal.url}/")
    oidc_provider.set_user("dana", password=IDP_PASSWORD, email="dana@example.com", email_verified=True,
                           groups=["reading-club"])
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(re.escape(oidc_provider.issuer) + r"/session/end"))
    assert page.get_by_role("heading", name="Sign out of the test provider?").is_visible()
    screenshot(page, "sso-provider-logout")
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{sso_portal.url}/accounts/login/")
    assert page.request.get(f"{sso_portal.url}/api/v1/corpora/").status in (401, 403)

    # Signed out at the provider too: the next sign-in asks for the password again, and the group
    # the provider removed is gone, and with it the corpus.
    _sign_in(page, sso_portal, oidc_provider, "dana")
    page.wait_for_url(f"{sso_portal.url}/")
    assert page.get_by_text("Research notes").count() == 0
    assert (
        _shell_value(
            sso_portal, "sorted(User.objects.get(username='dana').groups.values_list('name', flat=True))"
        )
        == "['reading-club']"
    )
    context.close()


def test_a_wrong_state_is_refused_with_a_page(browser, sso_portal: LivePortal) -> None:  # noqa: ANN001
    context = _context(browser)
    page = context.new_page()
    response = page.goto(f"{sso_portal.url}{CALLBACK_PATH}?state=not-a-state-we-sent&code=anything")
    assert response.status < 500
    assert page.get_by_role("heading", name="Sign-in failed").is_visible()
    context.close()


def test_an_unverified_email_does_not_take_over_the_local_account(
        browser, sso_portal: LivePortal, oidc_provider: OidcProvider) -> None:  # noqa: ANN001
    oidc_provider.set_user("mallory", password=IDP_PASSWORD, email="erin@example.com", email_verified=False)
    context = _context(browser)
    page = context.new_page()
    _sign_in(page, sso_portal, oidc_provider, "mallory")
    assert page.get_by_role("heading", name="Sign-in refused").is_visible()
    assert page.get_by_text("did not confirm that the address is yours").is_visible()
    assert _shell_value(sso_portal, "SocialAccount.objects.filter(uid='mallory').count()") == "0"
    assert _shell_value(sso_portal, "User.objects.get(username='erin').check_password(os.environ['P'])",
                        P=PASSWORD) == "True"
    context.close()


def test_a_verified_email_links_the_local_account(
        browser, sso_portal: LivePortal, oidc_provider: OidcProvider) -> None:  # noqa: ANN001
    oidc_provider.set_user(
        "frank-at-idp", password=IDP_PASSWORD, email="frank@example.com", email_verified=True
    )
    context = _context(browser)
    page = context.new_page()
    _sign_in(page, sso_portal, oidc_provider, "frank-at-idp")
    page.wait_for_url(f"{sso_portal.url}/")
    assert _shell_value(sso_portal, "SocialAccount.objects.get(uid='frank-at-idp').user.username") == "frank"
    context.close()


def test_a_blocked_group_is_refused_and_deactivates_tokens(
        browser, sso_portal: LivePortal, oidc_provider: OidcProvider) -> None:  # noqa: ANN001
    oidc_provider.set_user("gil", password=IDP_PASSWORD, email="gil@example.com", email_verified=True,
                           groups=["portal-admins"])
    context = _context(browser)
    page = context.new_page()
    _sign_in(page, sso_portal, oidc_provider, "gil")
    page.wait_for_url(f"{sso_portal.url}/")
    assert _shell_value(sso_portal, "User.objects.get(username='gil').is_staff") == "True"
    token = _shell_value(
        sso_portal,
        "__import__('accounts.services.tokens').services.tokens.api_token_create("
        "user=User.objects.get(username='gil'), name='ci')[1]",
    )
    request = urllib.request.Request(
        f"{sso_portal.url}/api/v1/corpora/", headers={"Authorization": f"Bearer {token}"}
    )
    assert urllib.request.urlopen(request, timeout=30).status == 200

    oidc_provider.set_user("gil", password=IDP_PASSWORD, email="gil@example.com", email_verified=True,
                           groups=["contractors"])
    context.clear_cookies()
    _sign_in(page, sso_portal, oidc_provider, "gil")
    assert page.get_by_text("Members of contractors may not sign in").is_visible()
    assert _shell_value(sso_portal, "User.objects.get(username='gil').is_active") == "False"
    # The audit trail (accounts.audit): the sign-in through the provider, then the deactivation.
    trail = "__import__('accounts.models').models.AuditEvent.objects.filter(target='gil').order_by('id')"
    assert _shell_value(sso_portal, f"[(e.action, e.details.get('method', '')) for e in {trail}]") \
        == "[('sign_in', 'single sign-on'), ('deactivated', '')]"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
    context.close()
