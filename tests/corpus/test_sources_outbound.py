"""The outbound policy for sources (core.outbound, issue 56), through the API, as the corpus's owner
and as staff (no bypass): addresses refused at creation before any connection, a name that resolves
to loopback and a redirect to a refused port refused at sync, nothing of them stored or searchable,
no fetched content in any message; allowed through SOURCE_ALLOWED_NETWORKS, the same sources sync.

Every server here listens on loopback; names resolve through tests/plugins/outbound.py (no query
leaves the machine)."""

from __future__ import annotations

import pytest

from corpus.sources.models import Source
from tests.corpus.source_servers import git_server, web_site
from tests.corpus.sources import found
from tests.plugins.api import error_of

SECRET = "The walrus credential is kept in the left drawer of the metadata cabinet."
PUBLIC = "93.184.215.14"  # a public address: the policy allows it; nothing here connects to it


def page(text: str) -> tuple[str, str]:
    return f"<html><body><h1>Notes</h1><p>{text}</p></body></html>", "text/html"


@pytest.fixture(params=["owner", "staff"])
def actor(request):  # noqa: ANN201 - a User
    return request.getfixturevalue(request.param)


@pytest.fixture
def site():
    with web_site() as served:
        served.pages = {"/robots.txt": ("User-agent: *\n", "text/plain"), "/docs/": page(SECRET)}
        yield served


def create(client, corpus, **body):  # noqa: ANN001, ANN201 - an API client, its response
    return client.post(f"/api/v1/corpora/{corpus.pk}/sources/", {"name": "notes"} | body, format="json")


def sync_api(client, source_id: int, capture) -> Source:  # noqa: ANN001
    with capture(execute=True):
        assert client.post(f"/api/v1/sources/{source_id}/sync/", {}, format="json").status_code == 202
    return Source.objects.get(pk=source_id)


def assert_refused(response, rule: str) -> None:  # noqa: ANN001
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "address_refused", error
    assert rule in error["message"] and "SOURCE_ALLOWED_NETWORKS" in error["message"], error


def test_literal_addresses_are_refused_at_creation_before_any_connection(api_for, corpus, actor, site):
    client = api_for(actor)
    port = site.port
    web = [("http://169.254.169.254/latest/meta-data/", "cloud metadata"), ("http://10.0.0.1/", "private"),
           ("http://192.168.1.1/", "private"), ("http://[::1]/", "loopback"),
           ("http://100.64.0.1/", "carrier-grade"),
           (f"http://127.0.0.1:{port}/docs/", "loopback"), ("http://127.0.0.1:8000/", "the portal's own"),
           ("http://127.0.0.1:8081/props", "the portal's own"), ("http://2852039166/", "cloud metadata"),
           (f"http://0x7f.1:{port}/docs/", "loopback"), (f"http://017700000001:{port}/docs/", "loopback"),
           (f"http://[::ffff:127.0.0.1]:{port}/docs/", "loopback"),
           (f"http://localhost:{port}/docs/", "loopback"),
           ("http://[fd00:ec2::254]/", "cloud metadata"), ("http://224.0.0.1/", "multicast"),
           ("http://0.0.0.0/", "unspecified")]
    for location, rule in web:
        assert_refused(create(client, corpus, kind="web", location=location), rule)
    assert_refused(create(client, corpus, kind="web", location=f"https://{PUBLIC}/docs/",
                          sitemap_url=f"http://127.0.0.1:{port}/sitemap.xml"), "loopback")
    assert_refused(create(client, corpus, kind="git", location="https://10.0.0.1/team/notes.git"), "private")
    assert_refused(create(client, corpus, kind="git", location=f"http://127.0.0.1:{port}/notes.git"),
                   "loopback")
    assert_refused(create(client, corpus, kind="s3", location="s3://bucket/notes", token="key:secret",
                          endpoint_url="http://169.254.169.254"), "cloud metadata")
    assert not site.requests, "a refused address was connected to"
    assert not Source.objects.exists()


def test_a_name_resolving_to_loopback_is_refused_at_sync(api_for, corpus, actor, member, site, names,
                                                          settings, django_capture_on_commit_callbacks):
    client = api_for(actor)
    names["intranet.test"] = [PUBLIC]  # what the name answered when the source was created
    response = create(client, corpus, kind="web", location=f"http://intranet.test:{site.port}/docs/")
    assert response.status_code == 201, response.content
    names["intranet.test"] = ["127.0.0.1"]  # and what it answers at the sync: a rebinding
    source = sync_api(client, response.json()["id"], django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED
    assert "loopback" in source.error and "SOURCE_ALLOWED_NETWORKS" in source.error, source.error
    assert not site.requests and not source.documents.exists()
    assert not found(member, corpus, "walrus credential")
    # An operator allows the loopback network: the same source syncs.
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    source = sync_api(client, source.pk, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED, source.error
    assert found(member, corpus, "walrus credential")


def test_a_redirect_to_a_refused_port_is_refused_at_sync(api_for, corpus, actor, member, site, settings,
                                                          django_capture_on_commit_callbacks):
    client = api_for(actor)
    with web_site() as entrance:
        entrance.redirects = {"/docs/": f"{site.origin}/docs/"}
        # This site only: not the redirect target's port.
        settings.SOURCE_ALLOWED_NETWORKS = [f"127.0.0.1:{entrance.port}"]
        response = create(client, corpus, kind="web", location=f"{entrance.origin}/docs/")
        assert response.status_code == 201, response.content
        source = sync_api(client, response.json()["id"], django_capture_on_commit_callbacks)
        assert source.status == Source.Status.FAILED
        assert "redirects to an address sources may not reach" in source.error and "loopback" in source.error
        assert ("/docs/", "302") in entrance.requests and not site.requests
        assert not source.documents.exists() and not found(member, corpus, "walrus credential")
        # The loopback network allowed: the redirect is no longer refused (another origin's page is
        # still not one of the site's: nothing is read from it).
        settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
        source = sync_api(client, source.pk, django_capture_on_commit_callbacks)
        assert source.status == Source.Status.SUCCEEDED, source.error
        assert not site.requests


def test_the_portals_own_ports_stay_refused_unless_named_exactly(api_for, corpus, actor, site, settings):
    client = api_for(actor)
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.OUTBOUND_OWN_PORTS = [site.port]  # as if the portal's web listened there
    assert_refused(create(client, corpus, kind="web", location=f"{site.origin}/docs/"), "the portal's own")
    settings.SOURCE_ALLOWED_NETWORKS = [f"127.0.0.1:{site.port}"]
    assert create(client, corpus, kind="web", location=f"{site.origin}/docs/").status_code == 201
    assert not site.requests


def test_no_fetched_content_in_any_message(api_for, corpus, owner, site, settings,
                                           django_capture_on_commit_callbacks):
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    client = api_for(owner)
    site.pages |= {
        "/docs/": ("<html><body><p>Index</p><a href='/docs/props.json'>props</a></body></html>", "text/html"),
        "/docs/props.json": ('{"model_path": "/srv/secret-model.gguf", "endpoint_slots": true}',
                             "application/json"),
        "/sitemap.xml": ("<urlset><loc>leaked-sitemap-words</urlset", "application/xml"),
    }
    response = create(client, corpus, kind="web", location=f"{site.origin}/docs/")
    source = sync_api(client, response.json()["id"], django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED, source.error
    reasons = " ".join(failure["reason"] for failure in source.failures)
    assert "props.json" in str(source.failures), source.failures
    for word in ("model_path", "endpoint_slots", "secret-model"):
        assert word not in reasons, source.failures
    Source.objects.filter(pk=source.pk).update(sitemap_url=f"{site.origin}/sitemap.xml")
    source = sync_api(client, source.pk, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "not well-formed XML" in source.error
    assert "leaked-sitemap-words" not in source.error and "urlset" not in source.error



def test_sources_never_use_the_environments_proxy(api_for, corpus, owner, member, site, settings, tmp_path,
                                                  monkeypatch, django_capture_on_commit_callbacks):
    """A proxy would connect on its own, past the check: web and Git sources go direct."""
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    client = api_for(owner)
    with web_site() as proxy, git_server(tmp_path / "git") as git:
        git.repository("notes", {"notes.md": "The narwhal runbook lives in the notes repository.\n"})
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.origin)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        for kind, location in [("web", f"{site.origin}/docs/"), ("git", git.url("notes"))]:
            response = create(client, corpus, name=kind, kind=kind, location=location)
            source = sync_api(client, response.json()["id"], django_capture_on_commit_callbacks)
            assert source.status == Source.Status.SUCCEEDED, source.error
        assert not proxy.requests
    assert found(member, corpus, "walrus credential") and found(member, corpus, "narwhal runbook")
