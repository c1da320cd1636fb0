"""What every user sees with debug off: styled error pages (no URL patterns), a favicon, and a
Content-Security-Policy that the rendered pages pass (no inline code, handlers or style attributes)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import include, path, reverse

from chat.services import conversation_create
from corpus.models import IndexBuild
from tests.plugins.portal import build_now, login


def _boom(request):  # noqa: ANN001, ANN202 - a view that fails, for the 500 page
    raise RuntimeError("a bug in a view")


def _forbidden(request):  # noqa: ANN001, ANN202
    raise PermissionDenied("You may read this corpus but not change it.")


urlpatterns = [path("boom/", _boom), path("forbidden/", _forbidden), path("", include("hdrag_site.urls"))]


def test_a_404_is_the_portals_page_without_url_patterns(owner, settings):
    assert settings.DEBUG is False
    response = login(owner).get("/no/such/page/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "HdRAG" in page and "Not found" in page and "favicon.svg" in page
    assert "URLconf" not in page and "corpora/" not in page.split("<main", 1)[1]


@pytest.mark.urls(__name__)
def test_403_and_500_are_styled(owner):
    client = login(owner)
    forbidden = client.get("/forbidden/")
    assert forbidden.status_code == 403
    assert (
        "Not allowed" in forbidden.content.decode() and "may read this corpus" in forbidden.content.decode()
    )
    client.raise_request_exception = False
    error = client.get("/boom/")
    assert error.status_code == 500
    page = error.content.decode()
    assert "Server error" in page and "HdRAG" in page and "a bug in a view" not in page


def test_favicon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("img/favicon.svg")
    icon = client.get(response["Location"])
    assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")


class _InlineCode(HTMLParser):
    """Collects what a strict CSP blocks: inline scripts, event-handler attributes, style attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and "src" not in names and names.get("type") != "application/json":
            self.blocked.append("inline <script>")
        if tag == "style":
            self.blocked.append("inline <style>")
        self.blocked += [
            f"<{tag} {name}=...>" for name, _ in attrs if name.startswith("on") or name == "style"
        ]


@pytest.fixture
def pages(corpus, owner, dataset, django_capture_on_commit_callbacks) -> list[str]:
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    conversation = conversation_create(user=owner, corpus_ids=[corpus.pk])
    return [reverse("chat:detail", args=[conversation.pk]), reverse("corpus:list"), reverse("corpus:new"),
            reverse("corpus:detail", args=[corpus.pk]), reverse("corpus:edit", args=[corpus.pk]),
            reverse("corpus:store_documents", args=[corpus.pk]), reverse("memory:search") + "?q=river+fox",
            reverse("memory:stats", args=[corpus.pk]), "/no/such/page/"]


def test_pages_send_a_strict_csp_and_pass_it(owner, staff, pages, client):
    owner_client = login(owner)
    admin = login(staff)
    responses = [(url, owner_client.get(url)) for url in pages]
    responses += [
        (url, admin.get(url)) for url in ("/admin/", "/admin/corpus/corpus/", "/admin/axes/accessattempt/")
    ]
    responses += [("login", client.get(reverse("login")))]
    for url, response in responses:
        policy = response.get("Content-Security-Policy", "")
        assert (
            "script-src 'self'" in policy and "style-src 'self'" in policy and "unsafe-inline" not in policy
        ), url
        parser = _InlineCode()
        parser.feed(response.content.decode())
        assert parser.blocked == [], (url, parser.blocked)


def test_the_locked_out_page_passes_the_csp_too(owner, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        response = Client().post(reverse("login"), {"username": "owner", "password": "wrong"})
    assert response.status_code == 429 and "Content-Security-Policy" in response
    parser = _InlineCode()
    parser.feed(response.content.decode())
    assert parser.blocked == []
